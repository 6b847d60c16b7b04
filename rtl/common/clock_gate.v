`resetall
`timescale 1ns / 1ps
`default_nettype none

// A clock gate as an integrated clock-gating cell behaves: the enable passes a latch that is
// open while clk is low, so gclk = clk & latched enable has no glitch, and gclk rises exactly
// at the rising edges of clk at which en was high (en is sampled as a flop would sample it).
// Logic clocked by gclk sees the same values at an edge as logic clocked by clk: a block that
// holds its state anyway while en is low behaves cycle for cycle as if it ran on clk, and an
// event-driven or cycle-based simulator evaluates none of its clocked logic meanwhile.
module clock_gate (
    input  wire clk,
    input  wire en,
    output wire gclk
);

reg en_l;
/* verilator lint_off LATCH */
always @(clk or en)
    if (!clk) en_l = en;
/* verilator lint_on LATCH */
assign gclk = clk & en_l;

endmodule

`resetall
