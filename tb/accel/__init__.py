"""cocotb benches of the accelerator blocks (rtl/accel)."""
