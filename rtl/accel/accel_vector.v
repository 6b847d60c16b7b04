`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"
`include "accel_cfg.vh"

// The N-lane ALU of the accelerator (ALU instructions), purely combinational: result follows
// op/a/b/s_row/imm in the same cycle (accel_compute registers it). Lane n of each row is bits
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
    input  wire [3:0]           op,         // {XALU, `ALU_* / `XALU_* operation}
    input  wire [32*N-1:0]      a,          // A: the destination row's old value
    input  wire [32*N-1:0]      b,          // B: source row or broadcast immediate; REQ: M row
    input  wire [32*N-1:0]      s_row,      // REQ: shift row (low 6 bits of each lane)
    input  wire [23:0]          imm,        // REQ: zp [7:0], lo [15:8], hi [23:16]
    output wire [32*N-1:0]      result,
    output wire                 div_zero,   // DIV with B == 0 in a lane
    output wire                 neg_sqrt    // SQRT with B < 0 in a lane
);

localparam [3:0] OP_DIV = {1'b1, `XALU_DIV};
localparam [3:0] OP_SQRT = {1'b1, `XALU_SQRT};

// floor(sqrt(v)) of a 32-bit unsigned value, one result bit per step from the top
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

wire [N-1:0] lane_div_zero, lane_neg_sqrt;
assign div_zero = op == OP_DIV && |lane_div_zero;
assign neg_sqrt = op == OP_SQRT && |lane_neg_sqrt;

initial begin
    if (N < 1 || N > 64)
        $fatal(1, "accel_vector: N must be 1..64, got %0d", N);
end

wire [64:0] zp65 = {{57{imm[7]}}, imm[7:0]};
wire [64:0] lo65 = {{57{imm[15]}}, imm[15:8]};
wire [64:0] hi65 = {{57{imm[23]}}, imm[23:16]};

genvar g;
generate for (g = 0; g < N; g = g + 1) begin : g_lane
    wire [31:0] a_l = a[32*g +: 32];
    wire [31:0] b_l = b[32*g +: 32];
    wire [5:0]  s_l = s_row[32*g +: 6];

    wire [31:0] add_r = a_l + b_l;
    wire [31:0] max_r = ($signed(a_l) > $signed(b_l)) ? a_l : b_l;
    wire [31:0] min_r = ($signed(a_l) < $signed(b_l)) ? a_l : b_l;

    // Signed 64-bit product (exact: both factors sign-extended); MUL keeps its low half, REQ
    // uses all of it with M = B.
    wire [63:0] prod = {{32{a_l[31]}}, a_l} * {{32{b_l[31]}}, b_l};

    // SHR: rounding arithmetic shift by B[4:0]; s = 0 adds nothing and shifts by 0, i.e. keeps A.
    wire [4:0]  shr_s = b_l[4:0];
    wire [32:0] shr_sum = {a_l[31], a_l} + ((shr_s == 5'd0) ? 33'd0 : (33'd1 << (shr_s - 5'd1)));
    wire [32:0] shr_q = $signed(shr_sum) >>> shr_s;

    // REQ: rounding shift of the product, zero point, clamp (max with lo first, then min with hi).
    wire [64:0] req_sum = {prod[63], prod} + ((s_l == 6'd0) ? 65'd0 : (65'd1 << (s_l - 6'd1)));
    wire [64:0] req_r = $signed(req_sum) >>> s_l;
    wire [64:0] req_y = req_r + zp65;
    wire [64:0] req_lo = ($signed(req_y) < $signed(lo65)) ? lo65 : req_y;
    wire [64:0] req_c = ($signed(req_lo) > $signed(hi65)) ? hi65 : req_lo;

    // DIV and SQRT: B == 0 and B == -1 (whose quotient -A may not fit) and B < 0 apart, so
    // that no division by zero or overflow reaches the operator
    wire        b_zero = b_l == 32'd0;
    wire        b_minus1 = b_l == 32'hFFFF_FFFF;
    wire [31:0] div_b = (b_zero || b_minus1) ? 32'd1 : b_l;
    // (a signed division on its own: inside the conditional below it would be unsigned)
    wire signed [31:0] quo = $signed(a_l) / $signed(div_b);
    wire [31:0] div_r = b_zero ? 32'd0 : b_minus1 ? 32'd0 - a_l : quo;
    wire [31:0] sqrt_r = b_l[31] ? 32'd0 : {16'd0, isqrt(b_l)};
    assign lane_div_zero[g] = b_zero;
    assign lane_neg_sqrt[g] = b_l[31];

    reg [31:0] res;
    always @* begin
        case (op)
            {1'b0, `ALU_ADD}: res = add_r;
            {1'b0, `ALU_MAX}: res = max_r;
            {1'b0, `ALU_MIN}: res = min_r;
            {1'b0, `ALU_MUL}: res = prod[31:0];
            {1'b0, `ALU_SHR}: res = shr_q[31:0];
            {1'b0, `ALU_MOV}: res = b_l;
            {1'b0, `ALU_REQ}: res = req_c[31:0];
            OP_DIV:           res = div_r;
            OP_SQRT:          res = sqrt_r;
            default:          res = a_l;
        endcase
    end
    assign result[32*g +: 32] = res;

    // shr_q[32] and req_c[64:32] are sign copies (the results fit 32 bits); the shift lanes use
    // only their low 6 bits.
    wire unused_ok = &{1'b0, shr_q[32], req_c[64:32], s_row[32*g+6 +: 26]};
end endgenerate

endmodule

`resetall
