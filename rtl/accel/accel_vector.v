`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"
`include "accel_cfg.vh"

// The N-lane ALU of the accelerator (ALU instructions), purely combinational: result follows
// en/op/a/b/s_row/imm in the same cycle (accel_compute registers it). Only the operation op
// selects is computed, and only with en (a row in the unit): without en, result and the flags
// are 0, so a simulator spends nothing on the unit while the array works. Lane n of each row is bits
// [32n +: 32]. B is the source row, or the broadcast sign-extended immediate (the caller
// substitutes it). Bit-exact definitions (docs/isa.md):
//
//   ADD  (A + B) mod 2^32          MAX / MIN  signed          MUL  low 32 bits of A * B
//   MOV  B
//   SHR  s = B[4:0]; s == 0 ? A : (A + 2^(s-1)) >>> s, with a 33-bit sum (no overflow)
//   REQ  p = A * M (signed 64-bit, M = B); s = s_row[5:0];
//        r = s == 0 ? p : (p + 2^(s-1)) >>> s; y = r + zp; result = min(max(y, lo), hi)
//        zp = imm[7:0], lo = imm[15:8], hi = imm[23:16] (signed int8). The rounding sum is 65
//        bits wide: |p| <= 2^62 and 2^62 + 2^62 (A = M = -2^31, s = 63) needs 65 bits to be exact.
//
// XALU operations (op[3] set; docs/isa.md "XALU"), computed here in one cycle: the compute
// unit holds the issue of the next row for their `XALU_*_CYCLES, the time an iterative unit
// takes, so their cost is that of such a unit:
//
//   DIV  B == 0 ? 0 : B == -1 ? -A (wraps) : A / B truncated toward zero; div_zero if any
//        lane has B == 0
//   SQRT floor(sqrt(B)) (digit by digit, 16 steps); 0 and neg_sqrt if any lane has B < 0
//
// ALU opcode 7 and XALU operations 2..7 (the fetch unit rejects them) return A.
module accel_vector #(
    parameter integer N = `ACCEL_N  // lanes (int32 each)
) (
    input  wire                 en,         // a row is computed (else result and flags are 0)
    input  wire [3:0]           op,         // {XALU, `ALU_* / `XALU_* operation}
    input  wire [32*N-1:0]      a,          // A: the destination row's old value
    input  wire [32*N-1:0]      b,          // B: source row or broadcast immediate; REQ: M row
    input  wire [32*N-1:0]      s_row,      // REQ: shift row (low 6 bits of each lane)
    input  wire [23:0]          imm,        // REQ: zp [7:0], lo [15:8], hi [23:16]
    output reg  [32*N-1:0]      result,
    output reg                  div_zero,   // DIV with B == 0 in a lane
    output reg                  neg_sqrt    // SQRT with B < 0 in a lane
);

localparam [3:0] OP_ADD = {1'b0, `ALU_ADD};
localparam [3:0] OP_MAX = {1'b0, `ALU_MAX};
localparam [3:0] OP_MIN = {1'b0, `ALU_MIN};
localparam [3:0] OP_MUL = {1'b0, `ALU_MUL};
localparam [3:0] OP_SHR = {1'b0, `ALU_SHR};
localparam [3:0] OP_MOV = {1'b0, `ALU_MOV};
localparam [3:0] OP_REQ = {1'b0, `ALU_REQ};
localparam [3:0] OP_DIV = {1'b1, `XALU_DIV};
localparam [3:0] OP_SQRT = {1'b1, `XALU_SQRT};

initial begin
    if (N < 1 || N > 64)
        $fatal(1, "accel_vector: N must be 1..64, got %0d", N);
end

function [15:0] isqrt;
    input [31:0] v;
    reg [31:0] rem, root, trial;
    integer k;
    begin
        rem = v;
        root = 32'd0;
        for (k = 15; k >= 0; k = k - 1) begin
            trial = root | (32'd1 << (2 * k));
            if (rem >= trial) begin
                rem = rem - trial;
                root = (root >> 1) | (32'd1 << (2 * k));
            end else begin
                root = root >> 1;
            end
        end
        isqrt = root[15:0];
    end
endfunction

// SHR of one lane: s == 0 ? a : (a + 2^(s-1)) >>> s, the sum 33 bits wide
function [31:0] lane_shr;
    input [31:0] a_l;
    input [4:0]  s;
    reg [32:0] sum;
    begin
        sum = {a_l[31], a_l} + ((s == 5'd0) ? 33'd0 : (33'd1 << (s - 5'd1)));
        sum = $signed(sum) >>> s;
        lane_shr = sum[31:0];
    end
endfunction

// REQ of one lane: the rounded, shifted 64-bit product plus zp, clamped to [lo, hi]
function [31:0] lane_req;
    input [31:0] a_l;
    input [31:0] m_l;
    input [5:0]  s;
    input [23:0] req_imm;
    reg [63:0] prod;
    reg [64:0] sum, r, y, lo65, hi65, c;
    begin
        prod = {{32{a_l[31]}}, a_l} * {{32{m_l[31]}}, m_l};
        sum = {prod[63], prod} + ((s == 6'd0) ? 65'd0 : (65'd1 << (s - 6'd1)));
        r = $signed(sum) >>> s;
        y = r + {{57{req_imm[7]}}, req_imm[7:0]};
        lo65 = {{57{req_imm[15]}}, req_imm[15:8]};
        hi65 = {{57{req_imm[23]}}, req_imm[23:16]};
        c = ($signed(y) < $signed(lo65)) ? lo65 : y;
        c = ($signed(c) > $signed(hi65)) ? hi65 : c;
        lane_req = c[31:0];
    end
endfunction

// DIV of one lane: 0 for B == 0, -A (wrapping) for B == -1, else A / B toward zero
function [31:0] lane_div;
    input [31:0] a_l;
    input [31:0] b_l;
    reg signed [31:0] q;
    begin
        if (b_l == 32'd0) begin
            lane_div = 32'd0;
        end else if (b_l == 32'hFFFF_FFFF) begin
            lane_div = 32'd0 - a_l;
        end else begin
            q = $signed(a_l) / $signed(b_l);
            lane_div = q;
        end
    end
endfunction

integer g;
always @* begin : lanes
    reg [31:0] a_l, b_l;
    a_l = 32'd0;
    b_l = 32'd0;
    result = {32*N{1'b0}};
    div_zero = 1'b0;
    neg_sqrt = 1'b0;
    if (en) begin
        case (op)
            OP_ADD:
                for (g = 0; g < N; g = g + 1)
                    result[32*g +: 32] = a[32*g +: 32] + b[32*g +: 32];
            OP_MAX:
                for (g = 0; g < N; g = g + 1) begin
                    a_l = a[32*g +: 32];
                    b_l = b[32*g +: 32];
                    result[32*g +: 32] = ($signed(a_l) > $signed(b_l)) ? a_l : b_l;
                end
            OP_MIN:
                for (g = 0; g < N; g = g + 1) begin
                    a_l = a[32*g +: 32];
                    b_l = b[32*g +: 32];
                    result[32*g +: 32] = ($signed(a_l) < $signed(b_l)) ? a_l : b_l;
                end
            OP_MUL:
                for (g = 0; g < N; g = g + 1)
                    result[32*g +: 32] = a[32*g +: 32] * b[32*g +: 32];
            OP_SHR:
                for (g = 0; g < N; g = g + 1)
                    result[32*g +: 32] = lane_shr(a[32*g +: 32], b[32*g +: 5]);
            OP_MOV:
                result = b;
            OP_REQ:
                for (g = 0; g < N; g = g + 1)
                    result[32*g +: 32] = lane_req(a[32*g +: 32], b[32*g +: 32],
                                                  s_row[32*g +: 6], imm);
            OP_DIV:
                for (g = 0; g < N; g = g + 1) begin
                    b_l = b[32*g +: 32];
                    result[32*g +: 32] = lane_div(a[32*g +: 32], b_l);
                    if (b_l == 32'd0) div_zero = 1'b1;
                end
            OP_SQRT:
                for (g = 0; g < N; g = g + 1) begin
                    b_l = b[32*g +: 32];
                    result[32*g +: 32] = b_l[31] ? 32'd0 : {16'd0, isqrt(b_l)};
                    if (b_l[31]) neg_sqrt = 1'b1;
                end
            default:
                result = a;
        endcase
    end
end

// REQ reads the low 6 bits of each shift lane
genvar gu;
generate for (gu = 0; gu < N; gu = gu + 1) begin : g_unused
    wire unused_ok = &{1'b0, s_row[32*gu+6 +: 26]};
end endgenerate

endmodule

`resetall
