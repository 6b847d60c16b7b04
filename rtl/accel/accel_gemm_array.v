`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_cfg.vh"

// The N x N int8 GEMM array, weight-stationary.
//
// The weight tile W (N x N int8, W[k][n] at bits [8*(k*N+n) +: 8]) is latched by w_load and held
// until the next w_load. Every cycle one input row x (N int8, lane k at [8k +: 8]) may enter with
// in_valid, together with the current accumulator row acc_in (N int32); LAT = 1 cycle later
//
//     acc_out[n] = (reset_acc ? 0 : acc_in[n]) + sum_k x[k] * W[k][n]     (int32, wraps)
//
// leaves with out_valid and the row's tag. In depthwise mode (dw, the DW instruction) N rows
// X[k] (x_rows, row k at [8*N*k +: 8*N]) enter instead, and each lane is its own channel:
//
//     acc_out[n] = (reset_acc ? 0 : acc_in[n]) + sum_k X[k][n] * W[k][n]
//
// (the compute unit gives zero rows for the taps an instruction does not use). Full
// throughput: one row (or set of rows) per cycle. A row that enters
// in the same cycle as w_load already uses the new tile (so a GEMM's weight read and its first row
// can arrive together); rows that entered earlier are not affected. The products and the adder
// tree of each column are one stage in front of the output register.
module accel_gemm_array #(
    parameter integer N = `ACCEL_N,  // array size: N x N int8 MACs per row
    parameter integer TAG_W = 1      // width of the tag carried alongside each row
) (
    input  wire                 clk,
    input  wire                 rst,

    input  wire                 w_load,     // latch w_tile (takes effect for the row entering now)
    input  wire [8*N*N-1:0]     w_tile,

    input  wire                 in_valid,
    input  wire                 dw,         // depthwise: x_rows instead of x
    input  wire [8*N-1:0]       x,
    input  wire [8*N*N-1:0]     x_rows,
    input  wire [32*N-1:0]      acc_in,
    input  wire                 reset_acc,  // add to 0 instead of acc_in
    input  wire [TAG_W-1:0]     in_tag,

    output wire                 out_valid,
    output wire [32*N-1:0]      acc_out,
    output wire [TAG_W-1:0]     out_tag
);

// Pipeline latency from in_valid to out_valid (cycles); accel_compute relies on it being 1.
localparam integer LAT = 1;

initial begin
    if (N < 1 || N > 64)
        $fatal(1, "accel_gemm_array: N must be 1..64, got %0d", N);
    if (TAG_W < 1)
        $fatal(1, "accel_gemm_array: TAG_W must be >= 1, got %0d", TAG_W);
    if (LAT != 1)
        $fatal(1, "accel_gemm_array: LAT must be 1");
end

// Weight register; the effective tile of the entering row bypasses it on w_load.
reg  [8*N*N-1:0] w_reg;
wire [8*N*N-1:0] w_eff = w_load ? w_tile : w_reg;

always @(posedge clk) begin
    if (rst)
        w_reg <= {8*N*N{1'b0}};
    else if (w_load)
        w_reg <= w_tile;
end

// One column sum per lane n: (reset ? 0 : acc_in[n]) + sum_k x[k] * W[k][n] (depthwise:
// X[k][n] * W[k][n]). The product of two sign-extended int8 values is exact in 32 bits, and the
// low 32 bits of the sum are the int32 wrap-around result. It is computed in the clocked block, only for a row that enters: an
// event-driven simulator evaluates it once per row, not on every change of x, acc_in or the
// tile (Icarus re-ran all N*N products several times a cycle, rows or not).
function [31:0] col_sum;
    input integer n;
    reg signed [31:0] sum, prod;
    integer k;
    begin
        sum = reset_acc ? 32'sd0 : $signed(acc_in[32*n +: 32]);
        for (k = 0; k < N; k = k + 1) begin
            if (dw)
                prod = $signed(x_rows[8*(k*N+n) +: 8]) * $signed(w_eff[8*(k*N+n) +: 8]);
            else
                prod = $signed(x[8*k +: 8]) * $signed(w_eff[8*(k*N+n) +: 8]);
            sum = sum + prod;
        end
        col_sum = sum;
    end
endfunction

reg                 out_valid_reg;
reg [32*N-1:0]      acc_out_reg;
reg [TAG_W-1:0]     out_tag_reg;
integer n_s;

always @(posedge clk) begin
    if (rst)
        out_valid_reg <= 1'b0;
    else
        out_valid_reg <= in_valid;
    if (in_valid) begin
        for (n_s = 0; n_s < N; n_s = n_s + 1)
            acc_out_reg[32*n_s +: 32] <= col_sum(n_s);
        out_tag_reg <= in_tag;
    end
end

assign out_valid = out_valid_reg;
assign acc_out = acc_out_reg;
assign out_tag = out_tag_reg;

endmodule

`resetall
