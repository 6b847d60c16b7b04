"""The card-level bench: host software (the PcieDriver) driving the whole card."""
