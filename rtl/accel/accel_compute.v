`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"
`include "accel_cfg.vh"

// The compute unit: runs GEMM, DW, ALU and XALU instructions (docs/isa.md) one after the other,
// in program order, one loop iteration per cycle. DW is a GEMM whose iteration reads up to N
// input rows (its taps) at once and puts the array in depthwise mode; below, "GEMM" covers both
// where they do not differ. XALU is an ALU instruction whose operation (DIV, SQRT) takes
// `XALU_*_CYCLES per row: after each of its iterations nothing issues for that many cycles less
// one, so the next iteration, or the next instruction (which starts in the last of them), issues
// `XALU_*_CYCLES after it. A DIV row with B = 0 in a lane, or a SQRT row with B < 0, is found in
// the R stage: that row is not written and err pulses in the next cycle with DIV_ZERO /
// NEG_SQRT and err_pc = the instruction's (no later instruction has started by then).
//
// Instruction flow. The queue head is taken into the held register (Q) whenever Q is empty or
// its instruction starts in this cycle, and stop is low; the scratchpad range of the instruction
// is computed while it is taken. A held instruction starts when its pop tokens are there and the
// loop of the previous instruction is issuing its last iteration (or has finished): in that cycle
// it pulses its pops and either fails the range check (err pulses in the next cycle with SP_RANGE
// and err_pc = its insn_pc; nothing else happens, in particular no pushes, and nothing starts or
// is taken in the err cycle) or loads the loop registers. From the next cycle on one iteration is
// issued per cycle, so back-to-back instructions leave no bubble between their iterations. An
// instruction with outer == 0 or inner == 0 (and an opcode other than GEMM/ALU, which the fetch
// unit never sends) issues one empty slot that only carries its pushes.
//
// Pipeline of an iteration (scratchpad reads are synchronous, data the cycle after *_re):
//   I  issue: read INP[x] and ACC[a] (GEMM; ACC not read with reset; DW reads its taps' rows
//      INP[x + off[k]], k < taps, through the N-row port), or ACC[d], ACC[s] and, for REQ,
//      ACC[s+1] (ALU); the first iteration of a GEMM also reads WGT[wgt_base].
//   R  read data arrives; RAW forwarding (below); GEMM: the row enters accel_gemm_array (LAT 1,
//      with the weight tile of the same cycle on the first row); ALU: accel_vector, which is
//      purely combinational (and computes only for an ALU row), and its result is registered.
//   W  acc_we writes ACC[a] / ACC[d]. The push flags travel with the last iteration (or the
//      empty slot) and pulse in its W cycle: a token is never pushed before every write of the
//      instruction, and of every earlier instruction, has been made.
// Forwarding: an operand read in cycle t of a row written in cycle t (same-cycle read returns the
// old data) or in t+1 (still in the pipeline) takes the written value instead, newest first. So
// the unit never stalls for read-after-write hazards, within an instruction (acc_si = 0,
// src == dst, overlapping rows) or across instructions, and the results are those of the
// sequential loops.
//
// Status: idle = nothing held, issued or in flight. busy = a loop is issuing or iterations are in
// the pipeline. waiting = an instruction is held, its tokens are not there and nothing is busy
// (so a waiting unit is really blocked). stop: the held instruction is dropped, nothing is taken,
// the loop stops issuing (an instruction cut short never pushes); iterations already in the
// pipeline finish (at most two cycles). mac_pulse: one cycle per GEMM iteration (its W cycle),
// with mac_rows the input rows it multiplied (GEMM: N, DW: taps; the MACs are mac_rows x N);
// gemm_busy: a GEMM is issuing or in the pipeline.
module accel_compute #(
    parameter integer N = `ACCEL_N,                  // GEMM array size / lanes per row
    parameter integer INP_DEPTH = `ACCEL_INP_DEPTH,  // input scratchpad rows (power of two)
    parameter integer WGT_DEPTH = `ACCEL_WGT_DEPTH,  // weight scratchpad rows (power of two)
    parameter integer ACC_DEPTH = `ACCEL_ACC_DEPTH   // accumulator scratchpad rows (power of two)
) (
    input  wire                         clk,
    input  wire                         rst,

    // instruction queue head and tokens
    input  wire                         insn_valid,
    input  wire [127:0]                 insn,
    input  wire [31:0]                  insn_pc,
    output wire                         insn_ready,
    input  wire                         tok_prev_avail,
    input  wire                         tok_next_avail,
    output wire                         tok_pop_prev,
    output wire                         tok_pop_next,
    output wire                         tok_push_prev,
    output wire                         tok_push_next,
    input  wire                         stop,
    output wire                         idle,
    output wire                         waiting,
    output wire                         busy,
    output wire                         err,
    output wire [7:0]                   err_code,
    output wire [31:0]                  err_pc,

    // scratchpads; INP has an N-row read port: row k (address k at [k*AW +: AW], data at
    // [8*N*k +: 8*N]) is read where inp_rmask[k] is set (GEMM: row 0 only; DW: its taps) and
    // the data of the other rows is ignored
    output wire                         inp_re,
    output wire [N*$clog2(INP_DEPTH)-1:0] inp_raddr,
    output wire [N-1:0]                 inp_rmask,
    input  wire [8*N*N-1:0]             inp_rdata,
    output wire                         wgt_re,
    output wire [$clog2(WGT_DEPTH)-1:0] wgt_raddr,
    input  wire [8*N*N-1:0]             wgt_rdata,
    output wire                         acc_re0,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_raddr0,
    input  wire [32*N-1:0]              acc_rdata0,
    output wire                         acc_re1,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_raddr1,
    input  wire [32*N-1:0]              acc_rdata1,
    output wire                         acc_re2,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_raddr2,
    input  wire [32*N-1:0]              acc_rdata2,
    output wire                         acc_we,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_waddr,
    output wire [32*N-1:0]              acc_wdata,

    // counters
    output wire                         mac_pulse,
    output wire [7:0]                   mac_rows,
    output wire                         gemm_busy
);

// Row address widths of the scratchpads.
localparam integer INP_AW = $clog2(INP_DEPTH);
localparam integer N_I = N;
localparam [7:0]   N_ROWS = N_I[7:0];  // a GEMM iteration's input rows, for mac_rows
localparam integer WGT_AW = $clog2(WGT_DEPTH);
localparam integer ACC_AW = $clog2(ACC_DEPTH);

initial begin
    if (N < 1 || N > 64)
        $fatal(1, "accel_compute: N must be 1..64, got %0d", N);
    if (INP_AW < 1 || INP_AW > 24 || (1 << INP_AW) != INP_DEPTH)
        $fatal(1, "accel_compute: INP_DEPTH must be a power of two 2..2^24, got %0d", INP_DEPTH);
    if (WGT_AW < 1 || WGT_AW > 24 || (1 << WGT_AW) != WGT_DEPTH)
        $fatal(1, "accel_compute: WGT_DEPTH must be a power of two 2..2^24, got %0d", WGT_DEPTH);
    if (ACC_AW < 1 || ACC_AW > 24 || (1 << ACC_AW) != ACC_DEPTH)
        $fatal(1, "accel_compute: ACC_DEPTH must be a power of two 2..2^24, got %0d", ACC_DEPTH);
    // the decode below holds GEMM and ALU fields in registers of one width each
    if (`F_GEMM_OUTER_W != 12 || `F_ALU_OUTER_W != 12 || `F_GEMM_INNER_W != 12
            || `F_ALU_INNER_W != 12 || `F_GEMM_ACC_SO_W != 12 || `F_ALU_DST_SO_W != 12
            || `F_GEMM_INP_SO_W != 12 || `F_ALU_SRC_SO_W != 12 || `F_GEMM_ACC_SI_W != 8
            || `F_ALU_DST_SI_W != 8 || `F_GEMM_INP_SI_W != 8 || `F_ALU_SRC_SI_W != 8
            || `F_GEMM_ACC_BASE_W != 16 || `F_GEMM_INP_BASE_W != 16 || `F_GEMM_WGT_BASE_W != 16
            || `F_ALU_DST_BASE_W != 14 || `F_ALU_SRC_BASE_W != 14 || `F_ALU_IMM_W != 24
            || `F_DW_OUTER_W != 12 || `F_DW_INNER_W != 12 || `F_DW_ACC_SO_W != 12
            || `F_DW_INP_SO_W != 12 || `F_DW_ACC_SI_W != 4 || `F_DW_INP_SI_W != 4
            || `F_DW_ACC_BASE_W != 14 || `F_DW_INP_BASE_W != 16 || `F_DW_WGT_BASE_W != 12
            || `F_DW_TAPS_W != 7 || `F_DW_TAP_W_W != 4 || `F_DW_TAP_PITCH_W != 10)
        $fatal(1, "accel_compute: ISA field widths changed (accel_isa.vh); adapt the decode");
end

// --- decode of the queue head (GEMM, DW and ALU mapped onto one loop form) -----------------------
// a: the accumulator row written (GEMM/DW acc, ALU dst); b: the row streamed alongside (GEMM/DW
// inp, ALU src). DW's narrower fields are zero-extended.
wire [3:0]  d_opcode = insn[`F_HDR_OPCODE_LSB +: `F_HDR_OPCODE_W];
wire        d_dw = d_opcode == `OP_DW;
wire        d_gemm = d_opcode == `OP_GEMM || d_dw;     // uses the array
wire        d_xalu = d_opcode == `OP_XALU;
wire        d_alu = d_opcode == `OP_ALU || d_xalu;       // XALU: the ALU's format and loops

reg  [11:0] d_outer, d_inner, d_a_so, d_b_so;
reg  [15:0] d_a_base, d_b_base, d_wgt;
reg  [7:0]  d_a_si, d_b_si;
reg         d_reset;
reg  [6:0]  d_taps;         // input rows per iteration (GEMM: 1)
reg  [3:0]  d_tap_w;
reg  [9:0]  d_tap_pitch;
always @* begin
    d_outer = insn[`F_ALU_OUTER_LSB +: `F_ALU_OUTER_W];
    d_inner = insn[`F_ALU_INNER_LSB +: `F_ALU_INNER_W];
    d_a_base = {2'b00, insn[`F_ALU_DST_BASE_LSB +: `F_ALU_DST_BASE_W]};
    d_b_base = {2'b00, insn[`F_ALU_SRC_BASE_LSB +: `F_ALU_SRC_BASE_W]};
    d_a_so = insn[`F_ALU_DST_SO_LSB +: `F_ALU_DST_SO_W];
    d_a_si = insn[`F_ALU_DST_SI_LSB +: `F_ALU_DST_SI_W];
    d_b_so = insn[`F_ALU_SRC_SO_LSB +: `F_ALU_SRC_SO_W];
    d_b_si = insn[`F_ALU_SRC_SI_LSB +: `F_ALU_SRC_SI_W];
    d_wgt = insn[`F_GEMM_WGT_BASE_LSB +: `F_GEMM_WGT_BASE_W];
    d_reset = insn[`F_GEMM_RESET_LSB +: `F_GEMM_RESET_W];
    d_taps = 7'd1;
    d_tap_w = 4'd1;
    d_tap_pitch = 10'd0;
    if (d_opcode == `OP_GEMM) begin
        d_outer = insn[`F_GEMM_OUTER_LSB +: `F_GEMM_OUTER_W];
        d_inner = insn[`F_GEMM_INNER_LSB +: `F_GEMM_INNER_W];
        d_a_base = insn[`F_GEMM_ACC_BASE_LSB +: `F_GEMM_ACC_BASE_W];
        d_b_base = insn[`F_GEMM_INP_BASE_LSB +: `F_GEMM_INP_BASE_W];
        d_a_so = insn[`F_GEMM_ACC_SO_LSB +: `F_GEMM_ACC_SO_W];
        d_a_si = insn[`F_GEMM_ACC_SI_LSB +: `F_GEMM_ACC_SI_W];
        d_b_so = insn[`F_GEMM_INP_SO_LSB +: `F_GEMM_INP_SO_W];
        d_b_si = insn[`F_GEMM_INP_SI_LSB +: `F_GEMM_INP_SI_W];
    end else if (d_dw) begin
        d_outer = insn[`F_DW_OUTER_LSB +: `F_DW_OUTER_W];
        d_inner = insn[`F_DW_INNER_LSB +: `F_DW_INNER_W];
        d_a_base = {2'b00, insn[`F_DW_ACC_BASE_LSB +: `F_DW_ACC_BASE_W]};
        d_b_base = insn[`F_DW_INP_BASE_LSB +: `F_DW_INP_BASE_W];
        d_a_so = insn[`F_DW_ACC_SO_LSB +: `F_DW_ACC_SO_W];
        d_a_si = {4'd0, insn[`F_DW_ACC_SI_LSB +: `F_DW_ACC_SI_W]};
        d_b_so = insn[`F_DW_INP_SO_LSB +: `F_DW_INP_SO_W];
        d_b_si = {4'd0, insn[`F_DW_INP_SI_LSB +: `F_DW_INP_SI_W]};
        d_wgt = {4'd0, insn[`F_DW_WGT_BASE_LSB +: `F_DW_WGT_BASE_W]};
        d_reset = insn[`F_DW_RESET_LSB +: `F_DW_RESET_W];
        d_taps = insn[`F_DW_TAPS_LSB +: `F_DW_TAPS_W];
        d_tap_w = insn[`F_DW_TAP_W_LSB +: `F_DW_TAP_W_W];
        d_tap_pitch = insn[`F_DW_TAP_PITCH_LSB +: `F_DW_TAP_PITCH_W];
    end
end
wire [3:0]  d_op = {d_xalu, insn[`F_ALU_ALU_OP_LSB +: `F_ALU_ALU_OP_W]};
wire        d_use_imm = insn[`F_ALU_USE_IMM_LSB +: `F_ALU_USE_IMM_W];
wire [23:0] d_imm = insn[`F_ALU_IMM_LSB +: `F_ALU_IMM_W];
wire [3:0]  d_flags = {insn[`F_HDR_PUSH_NEXT_LSB], insn[`F_HDR_PUSH_PREV_LSB],
                       insn[`F_HDR_POP_NEXT_LSB], insn[`F_HDR_POP_PREV_LSB]};

// No iteration: empty loop, or not a compute opcode.
wire        d_zero = !(d_gemm || d_alu) || d_outer == 12'd0 || d_inner == 12'd0;

// The input row offset of tap k: (k / tap_w) * tap_pitch + k % tap_w, counted up tap by tap (the
// fetch unit lets through only taps 1..N and tap_w >= 1; tap_w 0 is taken as 1 here so that
// nothing is undefined). tap_offsets gives taps 0..N-1; tap_last the offset of tap taps-1.
function [16*N-1:0] tap_offsets;
    input [3:0] tap_w;
    input [9:0] pitch;
    reg [15:0] row_base;
    reg [3:0]  col;
    integer k;
    begin
        row_base = 16'd0;
        col = 4'd0;
        for (k = 0; k < N; k = k + 1) begin
            tap_offsets[16*k +: 16] = row_base + {12'd0, col};
            if (col + 4'd1 >= tap_w) begin
                col = 4'd0;
                row_base = row_base + {6'd0, pitch};
            end else begin
                col = col + 4'd1;
            end
        end
    end
endfunction

function [31:0] tap_last;
    input [6:0] taps;
    input [3:0] tap_w;
    input [9:0] pitch;
    reg [6:0] k, w;
    begin
        k = taps - 7'd1;
        w = {3'd0, tap_w == 4'd0 ? 4'd1 : tap_w};
        tap_last = {25'd0, k / w} * {22'd0, pitch} + {25'd0, k % w};
    end
endfunction

// Last row of a loop: base + (outer-1)*so + (inner-1)*si (strides are unsigned, so it is the
// largest). Below 2^26, exact in 32 bits.
function [31:0] last_row;
    input [15:0] base;
    input [11:0] outer;
    input [11:0] inner;
    input [11:0] so;
    input [7:0]  si;
    begin
        last_row = {16'd0, base} + {20'd0, outer - 12'd1} * {20'd0, so}
                 + {20'd0, inner - 12'd1} * {24'd0, si};
    end
endfunction

wire [31:0] d_a_last = last_row(d_a_base, d_outer, d_inner, d_a_so, d_a_si);
wire [31:0] d_b_last = last_row(d_b_base, d_outer, d_inner, d_b_so, d_b_si)
                     + {31'd0, d_op == {1'b0, `ALU_REQ} && d_alu}  // REQ also reads s+1
                     + (d_dw ? tap_last(d_taps, d_tap_w, d_tap_pitch) : 32'd0);
wire        d_a_oor = d_a_last >= ACC_DEPTH;
wire        d_b_oor = d_gemm ? d_b_last >= INP_DEPTH : !d_use_imm && d_b_last >= ACC_DEPTH;
wire        d_w_oor = d_gemm && {16'd0, d_wgt} >= WGT_DEPTH;
wire        d_range_err = !d_zero && (d_a_oor || d_b_oor || d_w_oor);

// --- held instruction (Q) ------------------------------------------------------------------------
reg         q_valid_reg;
reg [31:0]  q_pc_reg;
reg         q_gemm_reg, q_dw_reg, q_zero_reg, q_range_err_reg, q_reset_reg, q_use_imm_reg;
reg [6:0]   q_taps_reg;
reg [3:0]   q_tap_w_reg;
reg [9:0]   q_tap_pitch_reg;
reg [3:0]   q_flags_reg;                  // {push_next, push_prev, pop_next, pop_prev}
reg [11:0]  q_outer_reg, q_inner_reg, q_a_so_reg, q_b_so_reg;
reg [7:0]   q_a_si_reg, q_b_si_reg;
reg [15:0]  q_a_base_reg, q_b_base_reg, q_wgt_reg;
reg [3:0]   q_op_reg;                     // {XALU, alu_op}
reg [23:0]  q_imm_reg;

// --- loop registers (the instruction issuing iterations) -----------------------------------------
reg         run_valid_reg;
reg         run_null_reg, run_gemm_reg, run_dw_reg, run_first_reg, run_reset_reg;
reg         run_use_imm_reg;
reg [6:0]   run_taps_reg;
reg [3:0]   run_tap_w_reg;
reg [9:0]   run_tap_pitch_reg;
reg         run_push_prev_reg, run_push_next_reg;
reg [3:0]   run_op_reg;
reg [31:0]  run_pc_reg;
reg [23:0]  run_imm_reg;
reg [11:0]  run_outer_reg, run_inner_reg, run_o_reg, run_i_reg;
reg [11:0]  run_a_so_reg, run_b_so_reg;
reg [7:0]   run_a_si_reg, run_b_si_reg;
reg [31:0]  run_a_cur_reg, run_a_row_reg, run_b_cur_reg, run_b_row_reg, run_wgt_reg;

// --- pipeline: R stage (s1), W stage (s2), last write (w1) ---------------------------------------
reg                 s1_valid_reg, s1_wr_reg, s1_gemm_reg, s1_dw_reg, s1_wload_reg, s1_reset_reg;
reg [N-1:0]         s1_mask_reg;
reg [7:0]           s1_rows_reg, s2_rows_reg;
reg                 s1_use_imm_reg, s1_push_prev_reg, s1_push_next_reg;
reg [3:0]           s1_op_reg;
reg [31:0]          s1_pc_reg;
reg [23:0]          s1_imm_reg;
reg [ACC_AW-1:0]    s1_a_reg, s1_b_reg, s1_b1_reg;
reg                 s2_valid_reg, s2_wr_reg, s2_gemm_reg, s2_push_prev_reg, s2_push_next_reg;
reg [ACC_AW-1:0]    s2_a_reg;
reg [32*N-1:0]      s2_alu_reg;
reg                 w1_valid_reg;
reg [ACC_AW-1:0]    w1_addr_reg;
reg [32*N-1:0]      w1_data_reg;

reg                 err_reg;
reg [7:0]           err_code_reg;
reg [31:0]          err_pc_reg;
// XALU: cycles left before the next issue or start
reg [5:0]           xalu_wait_reg;
wire                xalu_free = xalu_wait_reg == 6'd0;
localparam [5:0]    DIV_WAIT = `XALU_DIV_CYCLES - 1;
localparam [5:0]    SQRT_WAIT = `XALU_SQRT_CYCLES - 1;
wire                vec_div_zero, vec_neg_sqrt;
wire                data_err;

// --- start and issue -----------------------------------------------------------------------------
wire tok_ok = (!q_flags_reg[0] || tok_prev_avail) && (!q_flags_reg[1] || tok_next_avail);
wire issue = run_valid_reg && !stop && xalu_free;
wire run_i_last = run_i_reg == run_inner_reg - 12'd1;
wire run_last = run_null_reg || (run_i_last && run_o_reg == run_outer_reg - 12'd1);
// (after an XALU, the next instruction starts in its last row's last cycle, so that it issues
// XALU_*_CYCLES after that row, and never before that row's operand check)
wire run_xalu = !run_gemm_reg && run_op_reg[3];
wire start = q_valid_reg && tok_ok && !stop && !err_reg && xalu_wait_reg[5:1] == 5'd0
           && (!run_valid_reg || (run_last && xalu_free && !run_xalu));
wire start_ok = start && !q_range_err_reg;
wire take = insn_valid && insn_ready;

assign insn_ready = !stop && !err_reg && (!q_valid_reg || start_ok);
assign tok_pop_prev = start && q_flags_reg[0];
assign tok_pop_next = start && q_flags_reg[1];

wire [31:0] b_plus1 = run_b_cur_reg + 32'd1;
wire        issue_rd = issue && !run_null_reg;

// The N-row INP read: tap k's row and whether it is read (k < taps; GEMM: taps = 1, tap 0 is
// the row). The offsets change only when an instruction starts.
wire [16*N-1:0] run_off = tap_offsets(run_tap_w_reg, run_tap_pitch_reg);
function [INP_AW-1:0] tap_row;
    input [31:0] row;
    input [15:0] off;
    reg [31:0] sum;
    begin
        sum = row + {16'd0, off};
        tap_row = sum[INP_AW-1:0];
    end
endfunction

reg  [N*INP_AW-1:0] inp_raddr_all;
reg  [N-1:0]        inp_rmask_all;
integer k_r;
always @* begin
    for (k_r = 0; k_r < N; k_r = k_r + 1) begin
        inp_raddr_all[k_r*INP_AW +: INP_AW] = tap_row(run_b_cur_reg, run_off[16*k_r +: 16]);
        inp_rmask_all[k_r] = k_r[6:0] < run_taps_reg;
    end
end

assign inp_re = issue_rd && run_gemm_reg;
assign inp_raddr = inp_raddr_all;
assign inp_rmask = inp_rmask_all;
assign wgt_re = issue_rd && run_gemm_reg && run_first_reg;
assign wgt_raddr = run_wgt_reg[WGT_AW-1:0];
assign acc_re0 = issue_rd && !(run_gemm_reg && run_reset_reg);
assign acc_raddr0 = run_a_cur_reg[ACC_AW-1:0];
assign acc_re1 = issue_rd && !run_gemm_reg && !run_use_imm_reg;
assign acc_raddr1 = run_b_cur_reg[ACC_AW-1:0];
assign acc_re2 = issue_rd && !run_gemm_reg && !run_use_imm_reg && run_op_reg == {1'b0, `ALU_REQ};
assign acc_raddr2 = b_plus1[ACC_AW-1:0];

always @(posedge clk) begin
    // Q: taken from the queue, leaves when it starts or on stop
    if (take) begin
        q_valid_reg <= 1'b1;
        q_pc_reg <= insn_pc;
        q_gemm_reg <= d_gemm;
        q_dw_reg <= d_dw;
        q_taps_reg <= d_taps;
        q_tap_w_reg <= d_tap_w;
        q_tap_pitch_reg <= d_tap_pitch;
        q_zero_reg <= d_zero;
        q_range_err_reg <= d_range_err;
        q_reset_reg <= d_reset;
        q_use_imm_reg <= d_use_imm;
        q_flags_reg <= d_flags;
        q_outer_reg <= d_outer;
        q_inner_reg <= d_inner;
        q_a_so_reg <= d_a_so;
        q_a_si_reg <= d_a_si;
        q_b_so_reg <= d_b_so;
        q_b_si_reg <= d_b_si;
        q_a_base_reg <= d_a_base;
        q_b_base_reg <= d_b_base;
        q_wgt_reg <= d_wgt;
        q_op_reg <= d_op;
        q_imm_reg <= d_imm;
    end else if (start || stop) begin
        q_valid_reg <= 1'b0;
    end

    // loop registers: loaded at start, stepped at every issue
    if (start_ok) begin
        run_valid_reg <= 1'b1;
        run_null_reg <= q_zero_reg;
        run_gemm_reg <= q_gemm_reg;
        run_dw_reg <= q_dw_reg;
        run_taps_reg <= q_taps_reg;
        run_tap_w_reg <= q_tap_w_reg;
        run_tap_pitch_reg <= q_tap_pitch_reg;
        run_first_reg <= 1'b1;
        run_reset_reg <= q_reset_reg;
        run_use_imm_reg <= q_use_imm_reg;
        run_push_prev_reg <= q_flags_reg[2];
        run_push_next_reg <= q_flags_reg[3];
        run_op_reg <= q_op_reg;
        run_pc_reg <= q_pc_reg;
        run_imm_reg <= q_imm_reg;
        run_outer_reg <= q_outer_reg;
        run_inner_reg <= q_inner_reg;
        run_o_reg <= 12'd0;
        run_i_reg <= 12'd0;
        run_a_so_reg <= q_a_so_reg;
        run_a_si_reg <= q_a_si_reg;
        run_b_so_reg <= q_b_so_reg;
        run_b_si_reg <= q_b_si_reg;
        run_a_cur_reg <= {16'd0, q_a_base_reg};
        run_a_row_reg <= {16'd0, q_a_base_reg};
        run_b_cur_reg <= {16'd0, q_b_base_reg};
        run_b_row_reg <= {16'd0, q_b_base_reg};
        run_wgt_reg <= {16'd0, q_wgt_reg};
    end else if (issue) begin
        run_first_reg <= 1'b0;
        if (run_last) begin
            run_valid_reg <= 1'b0;
        end else if (run_i_last) begin
            run_i_reg <= 12'd0;
            run_o_reg <= run_o_reg + 12'd1;
            run_a_row_reg <= run_a_row_reg + {20'd0, run_a_so_reg};
            run_a_cur_reg <= run_a_row_reg + {20'd0, run_a_so_reg};
            run_b_row_reg <= run_b_row_reg + {20'd0, run_b_so_reg};
            run_b_cur_reg <= run_b_row_reg + {20'd0, run_b_so_reg};
        end else begin
            run_i_reg <= run_i_reg + 12'd1;
            run_a_cur_reg <= run_a_cur_reg + {24'd0, run_a_si_reg};
            run_b_cur_reg <= run_b_cur_reg + {24'd0, run_b_si_reg};
        end
    end else if (stop) begin
        run_valid_reg <= 1'b0;
    end

    // XALU: an iteration holds the issue for its cycles
    if (issue_rd && run_xalu)
        xalu_wait_reg <= run_op_reg == {1'b1, `XALU_DIV} ? DIV_WAIT : SQRT_WAIT;
    else if (!xalu_free)
        xalu_wait_reg <= xalu_wait_reg - 6'd1;

    // range error: one-cycle pulse after the failing start; XALU operand error: after its R
    // stage (no start can coincide: starts wait for the XALU's cycles)
    err_reg <= (start && q_range_err_reg) || data_err;
    err_code_reg <= data_err ? (vec_div_zero ? `ACC_ERR_DIV_ZERO : `ACC_ERR_NEG_SQRT)
                             : `ACC_ERR_SP_RANGE;
    if (data_err)
        err_pc_reg <= s1_pc_reg;
    else if (start)
        err_pc_reg <= q_pc_reg;

    if (rst) begin
        q_valid_reg <= 1'b0;
        run_valid_reg <= 1'b0;
        err_reg <= 1'b0;
        err_code_reg <= `ACC_ERR_NONE;
        err_pc_reg <= 32'd0;
        xalu_wait_reg <= 6'd0;
    end
end

// --- R stage: operands with forwarding, the array and the vector unit ----------------------------
// The operand of a row read in cycle t: the write of cycle t+1 (W stage now) if it is that row,
// else the write of cycle t (w1; the read returned the old data), else the scratchpad's data.
function [32*N-1:0] fwd;
    input [32*N-1:0]    rdata;
    input [ACC_AW-1:0]  addr;
    input               we_now;
    input [ACC_AW-1:0]  waddr_now;
    input [32*N-1:0]    wdata_now;
    input               we_prev;
    input [ACC_AW-1:0]  waddr_prev;
    input [32*N-1:0]    wdata_prev;
    begin
        if (we_now && waddr_now == addr)
            fwd = wdata_now;
        else if (we_prev && waddr_prev == addr)
            fwd = wdata_prev;
        else
            fwd = rdata;
    end
endfunction

wire [32*N-1:0] arr_acc_out;
wire [32*N-1:0] opnd_a = fwd(acc_rdata0, s1_a_reg, acc_we, s2_a_reg, acc_wdata,
                             w1_valid_reg, w1_addr_reg, w1_data_reg);
wire [32*N-1:0] opnd_s = fwd(acc_rdata1, s1_b_reg, acc_we, s2_a_reg, acc_wdata,
                             w1_valid_reg, w1_addr_reg, w1_data_reg);
wire [32*N-1:0] opnd_s1 = fwd(acc_rdata2, s1_b1_reg, acc_we, s2_a_reg, acc_wdata,
                              w1_valid_reg, w1_addr_reg, w1_data_reg);
wire [32*N-1:0] imm_row = {N{{8{s1_imm_reg[23]}}, s1_imm_reg}};

// The taps' rows as the array takes them: rows not read (k >= taps) are zero.
reg  [8*N*N-1:0] inp_rows;
integer k_m;
always @* begin
    for (k_m = 0; k_m < N; k_m = k_m + 1)
        inp_rows[8*N*k_m +: 8*N] = s1_mask_reg[k_m] ? inp_rdata[8*N*k_m +: 8*N] : {8*N{1'b0}};
end
wire [32*N-1:0] vec_result;

wire            arr_out_valid;
wire            arr_out_tag;

accel_gemm_array #(.N(N), .TAG_W(1)) gemm_array (
    .clk(clk),
    .rst(rst),
    .w_load(s1_valid_reg && s1_wload_reg),
    .w_tile(wgt_rdata),
    .in_valid(s1_valid_reg && s1_wr_reg && s1_gemm_reg),
    .dw(s1_dw_reg),
    .x(inp_rdata[8*N-1:0]),
    .x_rows(inp_rows),
    .acc_in(opnd_a),
    .reset_acc(s1_reset_reg),
    .in_tag(1'b0),
    .out_valid(arr_out_valid),
    .acc_out(arr_acc_out),
    .out_tag(arr_out_tag)
);

accel_vector #(.N(N)) vector (
    .en(s1_valid_reg && !s1_gemm_reg),    // (its result and flags are read only then)
    .op(s1_op_reg),
    .a(opnd_a),
    .b(s1_use_imm_reg ? imm_row : opnd_s),
    .s_row(opnd_s1),
    .imm(s1_imm_reg),
    .result(vec_result),
    .div_zero(vec_div_zero),
    .neg_sqrt(vec_neg_sqrt)
);
assign data_err = s1_valid_reg && s1_wr_reg && !s1_gemm_reg && (vec_div_zero || vec_neg_sqrt);

always @(posedge clk) begin
    // I -> R
    s1_valid_reg <= issue;
    s1_wr_reg <= !run_null_reg;
    s1_gemm_reg <= run_gemm_reg;
    s1_dw_reg <= run_dw_reg;
    s1_mask_reg <= inp_rmask_all;
    s1_rows_reg <= run_dw_reg ? {1'b0, run_taps_reg} : N_ROWS;
    s1_wload_reg <= run_gemm_reg && run_first_reg;
    s1_reset_reg <= run_reset_reg;
    s1_use_imm_reg <= run_use_imm_reg;
    s1_op_reg <= run_op_reg;
    s1_pc_reg <= run_pc_reg;
    s1_imm_reg <= run_imm_reg;
    s1_a_reg <= run_a_cur_reg[ACC_AW-1:0];
    s1_b_reg <= run_b_cur_reg[ACC_AW-1:0];
    s1_b1_reg <= b_plus1[ACC_AW-1:0];
    s1_push_prev_reg <= run_last && run_push_prev_reg;
    s1_push_next_reg <= run_last && run_push_next_reg;

    // R -> W
    s2_valid_reg <= s1_valid_reg;
    s2_wr_reg <= s1_wr_reg && !data_err;          // an XALU row with a bad operand: no write
    s2_gemm_reg <= s1_gemm_reg;
    s2_rows_reg <= s1_rows_reg;
    s2_a_reg <= s1_a_reg;
    s2_push_prev_reg <= s1_push_prev_reg;
    s2_push_next_reg <= s1_push_next_reg;
    if (s1_valid_reg && !s1_gemm_reg)
        s2_alu_reg <= vec_result;

    // W -> the write of the previous cycle, for forwarding
    w1_valid_reg <= acc_we;
    w1_addr_reg <= s2_a_reg;
    w1_data_reg <= acc_wdata;

    if (rst) begin
        s1_valid_reg <= 1'b0;
        s2_valid_reg <= 1'b0;
        w1_valid_reg <= 1'b0;
    end
end

// --- W stage and status --------------------------------------------------------------------------
assign acc_we = s2_valid_reg && s2_wr_reg;
assign acc_waddr = s2_a_reg;
assign acc_wdata = s2_gemm_reg ? arr_acc_out : s2_alu_reg;
assign tok_push_prev = s2_valid_reg && s2_push_prev_reg;
assign tok_push_next = s2_valid_reg && s2_push_next_reg;

assign busy = run_valid_reg || s1_valid_reg || s2_valid_reg || !xalu_free;
assign idle = !q_valid_reg && !busy;
assign waiting = q_valid_reg && !busy && !tok_ok;
assign err = err_reg;
assign err_code = err_reg ? err_code_reg : `ACC_ERR_NONE;
assign err_pc = err_pc_reg;
assign mac_pulse = acc_we && s2_gemm_reg;
assign mac_rows = s2_rows_reg;
assign gemm_busy = (run_valid_reg && run_gemm_reg) || (s1_valid_reg && s1_gemm_reg)
                 || (s2_valid_reg && s2_gemm_reg);

// The loop addresses are 32-bit sums whose rows in use are below the depth (range check); the
// array's own valid and tag are not needed (its latency is fixed at 1).
wire unused_ok = &{1'b0, run_a_cur_reg[31:ACC_AW], run_b_cur_reg[31:ACC_AW],
                   run_b_cur_reg[31:INP_AW], run_wgt_reg[31:WGT_AW], b_plus1[31:ACC_AW],
                   arr_out_valid, arr_out_tag};

endmodule

`resetall
