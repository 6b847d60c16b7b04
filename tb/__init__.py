"""cocotb testbenches for the card's RTL modules."""
