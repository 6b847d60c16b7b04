`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "card_regs.vh"
`include "accel_isa.vh"
`include "accel_cfg.vh"

// The accelerator: fetch, load, compute and store units around three scratchpads, one AXI4
// master on the card interconnect, and the ACC_* registers that csr forwards. This module owns
// what the units share: the registers and counters, the instruction queues, the dependency-token
// counters, the error latch, the deadlock detector, the scratchpads and the AXI read arbiter
// (fetch reads with ID 0, load with ID 1; the store unit has the write channels). See
// docs/accel.md and docs/isa.md.
module accel #(
    parameter integer N = `ACCEL_N,                      // N x N int8 MACs per cycle
    parameter integer INP_DEPTH = `ACCEL_INP_DEPTH,      // input scratchpad rows (N int8 each)
    parameter integer WGT_DEPTH = `ACCEL_WGT_DEPTH,      // weight scratchpad rows (N x N int8 each)
    parameter integer ACC_DEPTH = `ACCEL_ACC_DEPTH,      // accumulator rows (N int32 each)
    parameter integer QUEUE_DEPTH = `ACCEL_QUEUE_DEPTH,  // per-unit queue (power of two)
    parameter integer DATA_WIDTH = `ACCEL_DATA_WIDTH,    // card AXI data width
    parameter integer ADDR_WIDTH = 32,                   // card AXI address width
    parameter integer ID_WIDTH = 6                       // AXI ID width of this master
) (
    input  wire                     clk,
    input  wire                     rst,

    // register window from csr (BAR0 offsets; reads are combinational)
    input  wire                     reg_wr,
    input  wire [11:0]              reg_waddr,
    input  wire [31:0]              reg_wdata,
    input  wire [3:0]               reg_wstrb,
    input  wire [11:0]              reg_raddr,
    input  wire                     reg_re,       // a read of reg_raddr: reg_rdata is valid
    output reg  [31:0]              reg_rdata,
    output wire                     irq_done,     // one-cycle pulse: a program reached END
    output wire                     irq_err,      // one-cycle pulse: a program stopped on an error

    // AXI4 master (card memory)
    output wire [ID_WIDTH-1:0]      m_axi_awid,
    output wire [ADDR_WIDTH-1:0]    m_axi_awaddr,
    output wire [7:0]               m_axi_awlen,
    output wire [2:0]               m_axi_awsize,
    output wire [1:0]               m_axi_awburst,
    output wire                     m_axi_awvalid,
    input  wire                     m_axi_awready,
    output wire [DATA_WIDTH-1:0]    m_axi_wdata,
    output wire [DATA_WIDTH/8-1:0]  m_axi_wstrb,
    output wire                     m_axi_wlast,
    output wire                     m_axi_wvalid,
    input  wire                     m_axi_wready,
    input  wire [ID_WIDTH-1:0]      m_axi_bid,
    input  wire [1:0]               m_axi_bresp,
    input  wire                     m_axi_bvalid,
    output wire                     m_axi_bready,
    output wire [ID_WIDTH-1:0]      m_axi_arid,
    output wire [ADDR_WIDTH-1:0]    m_axi_araddr,
    output wire [7:0]               m_axi_arlen,
    output wire [2:0]               m_axi_arsize,
    output wire [1:0]               m_axi_arburst,
    output wire                     m_axi_arvalid,
    input  wire                     m_axi_arready,
    input  wire [ID_WIDTH-1:0]      m_axi_rid,
    input  wire [DATA_WIDTH-1:0]    m_axi_rdata,
    input  wire [1:0]               m_axi_rresp,
    input  wire                     m_axi_rlast,
    input  wire                     m_axi_rvalid,
    output wire                     m_axi_rready
);

localparam integer INP_AW = $clog2(INP_DEPTH);
localparam integer LNW = N > 1 ? $clog2(N) : 1;     // a byte lane of an INP row
localparam integer WGT_AW = $clog2(WGT_DEPTH);
localparam integer ACC_AW = $clog2(ACC_DEPTH);
localparam integer QW = 128 + 32;                  // queue entry: {pc, instruction}
localparam integer N_I = N;
localparam [63:0] LANES = {32'd0, N_I[31:0]};      // MACs per input row the array multiplies
localparam integer NCNT = `ACCEL_COUNTERS;
localparam integer AXSIZE_I = $clog2(DATA_WIDTH / 8);
localparam [2:0] AXSIZE = AXSIZE_I[2:0];
localparam integer CNT_BYTES_I = 8 * NCNT;
localparam [11:0] CNT_BYTES = CNT_BYTES_I[11:0];

initial begin
    if (N != 4 && N != 8 && N != 16) $fatal(1, "accel: N must be 4, 8 or 16");
    if ((1 << INP_AW) != INP_DEPTH || (1 << WGT_AW) != WGT_DEPTH || (1 << ACC_AW) != ACC_DEPTH)
        $fatal(1, "accel: scratchpad depths must be powers of two");
    if (DATA_WIDTH != 512) $fatal(1, "accel: the units assume a 512-bit card bus");
    if (ID_WIDTH < 1) $fatal(1, "accel: ID_WIDTH must be at least 1");
end

// --- state ---------------------------------------------------------------------------------------
localparam [1:0] S_IDLE = 2'd0, S_RUN = 2'd1, S_STOP = 2'd2;
reg [1:0]  state_reg;
reg        done_reg, error_reg;
reg [7:0]  err_code_reg;
reg [31:0] err_pc_reg;
reg        irq_done_reg, irq_err_reg;
reg [31:0] insn_base_reg, insn_count_reg;
reg [31:0] slot_reg [0:`ISA_NUM_SLOTS-1];
reg [63:0] cnt_reg [0:NCNT-1];
reg [7:0]  tok_l2c_reg, tok_c2l_reg, tok_c2s_reg, tok_s2c_reg;
reg        dl_prev_reg;
reg        no_end_reg;          // the fetch unit ran out of instructions without END
reg [31:0] no_end_pc_reg;

wire [`ISA_NUM_SLOTS*32-1:0] slots;
genvar gs;
generate for (gs = 0; gs < `ISA_NUM_SLOTS; gs = gs + 1) begin : g_slot
    assign slots[gs*32 +: 32] = slot_reg[gs];
end endgenerate

// Units start nothing unless a program runs (after an error, instructions may be left in the
// queues until the next START flushes them).
wire stop;

// --- unit wiring ---------------------------------------------------------------------------------
// fetch
wire [127:0] f_insn;
wire [31:0]  f_pc;
wire         f_push_ld, f_push_cp, f_push_st, f_ended, f_blocked, f_idle, f_insn_pulse, f_err;
wire [7:0]   f_err_code;
wire [31:0]  f_err_pc;
wire [ADDR_WIDTH-1:0] f_araddr, l_araddr;
wire [7:0]   f_arlen, l_arlen;
wire         f_arvalid, f_arready, f_rvalid, f_rready, l_arvalid, l_arready, l_rvalid, l_rready;

// queues
wire [QW-1:0] q_ld_head, q_cp_head, q_st_head;
wire          q_ld_full, q_cp_full, q_st_full, q_ld_valid, q_cp_valid, q_st_valid;
wire          q_ld_empty, q_cp_empty, q_st_empty;

// units: instruction handshake, tokens, status, errors
wire ld_ready, cp_ready, st_ready;
wire ld_pop_prev, ld_pop_next, ld_push_prev, ld_push_next;
wire cp_pop_prev, cp_pop_next, cp_push_prev, cp_push_next;
wire st_pop_prev, st_pop_next, st_push_prev, st_push_next;
wire ld_idle, ld_waiting, ld_busy, cp_idle, cp_waiting, cp_busy, st_idle, st_waiting, st_busy;
wire ld_err, cp_err, st_err;
wire [7:0]  ld_err_code, cp_err_code, st_err_code;
wire [31:0] ld_err_pc, cp_err_pc, st_err_pc;
wire ld_bytes_valid, st_bytes_valid, cp_mac_pulse, cp_gemm_busy;
wire [7:0] cp_mac_rows;
wire [31:0] ld_bytes, st_bytes;

// scratchpad ports
wire              ld_inp_we, ld_wgt_we, ld_acc_we;
wire [INP_AW-1:0] ld_inp_waddr;
wire [N*INP_AW-1:0] cp_inp_raddr;
wire [N-1:0]      cp_inp_rmask;
wire [WGT_AW-1:0] ld_wgt_waddr, cp_wgt_raddr;
wire [ACC_AW-1:0] ld_acc_waddr, cp_acc_raddr0, cp_acc_raddr1, cp_acc_raddr2, cp_acc_waddr,
                  st_acc_raddr;
wire [8*N-1:0]    ld_inp_wdata;
wire              ld_inp_wtr;                        // a transposed LOAD's write (one column)
wire [LNW-1:0]    ld_inp_wlane;
wire [8*N*N-1:0]  ld_wgt_wdata;
wire [32*N-1:0]   ld_acc_wdata, cp_acc_wdata;
wire              cp_inp_re, cp_wgt_re, cp_acc_re0, cp_acc_re1, cp_acc_re2, cp_acc_we, st_acc_re;
reg  [8*N*N-1:0]  cp_inp_rdata;
reg  [8*N*N-1:0]  cp_wgt_rdata;
reg  [32*N-1:0]   cp_acc_rdata0, cp_acc_rdata1, cp_acc_rdata2, st_acc_rdata;

// --- registers -----------------------------------------------------------------------------------
function [31:0] merge;
    input [31:0] old;
    input [31:0] data;
    input [3:0]  strb;
    integer b;
    begin
        for (b = 0; b < 4; b = b + 1)
            merge[b*8 +: 8] = strb[b] ? data[b*8 +: 8] : old[b*8 +: 8];
    end
endfunction

wire wr_ctrl = reg_wr && reg_waddr == `REG_ACC_CTRL && reg_wstrb[0];
wire start_cmd = wr_ctrl && reg_wdata[`ACC_CTRL_START_LSB] && state_reg == S_IDLE;
wire abort_cmd = wr_ctrl && reg_wdata[`ACC_CTRL_ABORT_LSB] && state_reg == S_RUN;
wire bad_config = insn_base_reg[3:0] != 4'd0 || insn_count_reg == 32'd0;
wire start_ok = start_cmd && !bad_config;
// The units run while the program runs. In the START cycle itself every unit is idle and its
// queue empty (a program ends only when all are, an error only after they have drained, and
// both empty the queues), so stop is high there too, as in any other idle cycle: an idle unit
// with nothing queued does the same with stop high or low, and the fetch unit starts on its
// start input. Kept a register's function, stop does not depend on the register-bus inputs,
// so a cycle-based simulator does not evaluate the units' logic for every change of them.
assign stop = state_reg != S_RUN;
wire slot_hit = reg_waddr >= `ACCEL_SLOT_BASE
                && reg_waddr < `ACCEL_SLOT_BASE + 12'd4 * `ISA_NUM_SLOTS;
wire [11:0] slot_off = reg_waddr - `ACCEL_SLOT_BASE;
wire [3:0]  slot_idx = slot_off[5:2];

// --- token counters ------------------------------------------------------------------------------
// Each counter has one pusher and one popper: load->compute (l2c), compute->load (c2l),
// compute->store (c2s), store->compute (s2c).
wire any_push = ld_push_next || cp_push_prev || cp_push_next || st_push_prev;
wire tok_ovf = (tok_l2c_reg == `ISA_TOKEN_MAX && ld_push_next && !cp_pop_prev)
            || (tok_c2l_reg == `ISA_TOKEN_MAX && cp_push_prev && !ld_pop_next)
            || (tok_c2s_reg == `ISA_TOKEN_MAX && cp_push_next && !st_pop_prev)
            || (tok_s2c_reg == `ISA_TOKEN_MAX && st_push_prev && !cp_pop_next);

// --- deadlock: every unit idle with an empty queue or waiting for a token, at least one waiting,
// the fetch unit finished or blocked on a full queue, no token pushed, for two cycles in a row
// (a push becomes visible to the waiting unit one cycle later).
wire dl_now = state_reg == S_RUN
    && ((ld_idle && q_ld_empty) || ld_waiting)
    && ((cp_idle && q_cp_empty) || cp_waiting)
    && ((st_idle && q_st_empty) || st_waiting)
    && (ld_waiting || cp_waiting || st_waiting)
    && (f_ended || f_blocked || no_end_reg) && !any_push;
wire deadlock = dl_now && dl_prev_reg;

// --- errors: the first one wins; same cycle: fetch, load, compute, store, then this module.
// NO_END is not an error yet: every dispatched instruction comes before it, so they all run
// first (as for END) and NO_END is reported when they have finished.
wire f_no_end = f_err && f_err_code == `ACC_ERR_NO_END;
reg        err_any;
reg [7:0]  err_code_now;
reg [31:0] err_pc_now;
always @* begin
    err_any = 1'b1;
    err_code_now = `ACC_ERR_NONE;
    err_pc_now = 32'd0;
    if (f_err && !f_no_end) begin
        err_code_now = f_err_code;
        err_pc_now = f_err_pc;
    end else if (ld_err) begin
        err_code_now = ld_err_code;
        err_pc_now = ld_err_pc;
    end else if (cp_err) begin
        err_code_now = cp_err_code;
        err_pc_now = cp_err_pc;
    end else if (st_err) begin
        err_code_now = st_err_code;
        err_pc_now = st_err_pc;
    end else if (tok_ovf) begin
        err_code_now = `ACC_ERR_TOKEN_OVERFLOW;
        err_pc_now = cnt_reg[`ACC_CNT_INSNS][31:0];
    end else if (deadlock) begin
        err_code_now = `ACC_ERR_DEADLOCK;
        err_pc_now = cnt_reg[`ACC_CNT_INSNS][31:0];
    end else if (abort_cmd) begin
        err_code_now = `ACC_ERR_ABORTED;
        err_pc_now = cnt_reg[`ACC_CNT_INSNS][31:0];
    end else begin
        err_any = 1'b0;
    end
end

wire all_idle = f_idle && ld_idle && cp_idle && st_idle;
wire finished = (f_ended || no_end_reg) && all_idle && q_ld_empty && q_cp_empty && q_st_empty;

integer i;
always @(posedge clk) begin
    irq_done_reg <= 1'b0;
    irq_err_reg <= 1'b0;
    dl_prev_reg <= dl_now;

    // software writes
    if (reg_wr) begin
        if (reg_waddr == `REG_ACC_INSN_BASE)
            insn_base_reg <= merge(insn_base_reg, reg_wdata, reg_wstrb);
        if (reg_waddr == `REG_ACC_INSN_COUNT)
            insn_count_reg <= merge(insn_count_reg, reg_wdata, reg_wstrb);
        if (slot_hit)
            slot_reg[slot_idx] <= merge(slot_reg[slot_idx], reg_wdata, reg_wstrb);
    end

    // tokens
    tok_l2c_reg <= tok_l2c_reg + {7'd0, ld_push_next} - {7'd0, cp_pop_prev};
    tok_c2l_reg <= tok_c2l_reg + {7'd0, cp_push_prev} - {7'd0, ld_pop_next};
    tok_c2s_reg <= tok_c2s_reg + {7'd0, cp_push_next} - {7'd0, st_pop_prev};
    tok_s2c_reg <= tok_s2c_reg + {7'd0, st_push_prev} - {7'd0, cp_pop_next};

    // counters
    if (state_reg != S_IDLE) cnt_reg[`ACC_CNT_CYCLES] <= cnt_reg[`ACC_CNT_CYCLES] + 64'd1;
    if (f_insn_pulse) cnt_reg[`ACC_CNT_INSNS] <= cnt_reg[`ACC_CNT_INSNS] + 64'd1;
    if (ld_busy) cnt_reg[`ACC_CNT_LOAD_BUSY] <= cnt_reg[`ACC_CNT_LOAD_BUSY] + 64'd1;
    if (ld_waiting) cnt_reg[`ACC_CNT_LOAD_STALL] <= cnt_reg[`ACC_CNT_LOAD_STALL] + 64'd1;
    if (cp_busy) cnt_reg[`ACC_CNT_COMPUTE_BUSY] <= cnt_reg[`ACC_CNT_COMPUTE_BUSY] + 64'd1;
    if (cp_waiting) cnt_reg[`ACC_CNT_COMPUTE_STALL] <= cnt_reg[`ACC_CNT_COMPUTE_STALL] + 64'd1;
    if (st_busy) cnt_reg[`ACC_CNT_STORE_BUSY] <= cnt_reg[`ACC_CNT_STORE_BUSY] + 64'd1;
    if (st_waiting) cnt_reg[`ACC_CNT_STORE_STALL] <= cnt_reg[`ACC_CNT_STORE_STALL] + 64'd1;
    if (cp_gemm_busy) cnt_reg[`ACC_CNT_GEMM_BUSY] <= cnt_reg[`ACC_CNT_GEMM_BUSY] + 64'd1;
    if (cp_mac_pulse)
        cnt_reg[`ACC_CNT_MACS] <= cnt_reg[`ACC_CNT_MACS] + {56'd0, cp_mac_rows} * LANES;
    if (ld_bytes_valid)
        cnt_reg[`ACC_CNT_BYTES_LOADED] <= cnt_reg[`ACC_CNT_BYTES_LOADED] + {32'd0, ld_bytes};
    if (st_bytes_valid)
        cnt_reg[`ACC_CNT_BYTES_STORED] <= cnt_reg[`ACC_CNT_BYTES_STORED] + {32'd0, st_bytes};

    case (state_reg)
        S_IDLE: if (start_cmd) begin
            done_reg <= 1'b0;
            error_reg <= 1'b0;
            err_code_reg <= `ACC_ERR_NONE;
            err_pc_reg <= 32'd0;
            for (i = 0; i < NCNT; i = i + 1) cnt_reg[i] <= 64'd0;
            tok_l2c_reg <= 8'd0;
            tok_c2l_reg <= 8'd0;
            tok_c2s_reg <= 8'd0;
            tok_s2c_reg <= 8'd0;
            no_end_reg <= 1'b0;
            if (bad_config) begin
                error_reg <= 1'b1;
                err_code_reg <= `ACC_ERR_BAD_CONFIG;
                irq_err_reg <= 1'b1;
            end else begin
                state_reg <= S_RUN;
            end
        end
        S_RUN: begin
            if (f_no_end) begin
                no_end_reg <= 1'b1;
                no_end_pc_reg <= f_err_pc;
            end
            if (err_any) begin
                err_code_reg <= err_code_now;
                err_pc_reg <= err_pc_now;
                state_reg <= S_STOP;
            end else if (finished && no_end_reg) begin
                error_reg <= 1'b1;
                err_code_reg <= `ACC_ERR_NO_END;
                err_pc_reg <= no_end_pc_reg;
                irq_err_reg <= 1'b1;
                state_reg <= S_IDLE;
            end else if (finished) begin
                done_reg <= 1'b1;
                irq_done_reg <= 1'b1;
                state_reg <= S_IDLE;
            end
        end
        S_STOP: if (all_idle) begin
            error_reg <= 1'b1;
            irq_err_reg <= 1'b1;
            state_reg <= S_IDLE;
        end
        default: state_reg <= S_IDLE;
    endcase

    if (rst) begin
        state_reg <= S_IDLE;
        done_reg <= 1'b0;
        error_reg <= 1'b0;
        err_code_reg <= `ACC_ERR_NONE;
        err_pc_reg <= 32'd0;
        irq_done_reg <= 1'b0;
        irq_err_reg <= 1'b0;
        insn_base_reg <= 32'd0;
        insn_count_reg <= 32'd0;
        for (i = 0; i < `ISA_NUM_SLOTS; i = i + 1) slot_reg[i] <= 32'd0;
        for (i = 0; i < NCNT; i = i + 1) cnt_reg[i] <= 64'd0;
        tok_l2c_reg <= 8'd0;
        tok_c2l_reg <= 8'd0;
        tok_c2s_reg <= 8'd0;
        tok_s2c_reg <= 8'd0;
        dl_prev_reg <= 1'b0;
        no_end_reg <= 1'b0;
        no_end_pc_reg <= 32'd0;
    end
end

assign irq_done = irq_done_reg;
assign irq_err = irq_err_reg;

// --- register reads ------------------------------------------------------------------------------
wire rslot_hit = reg_raddr >= `ACCEL_SLOT_BASE
                 && reg_raddr < `ACCEL_SLOT_BASE + 12'd4 * `ISA_NUM_SLOTS;
wire [11:0] rslot_off = reg_raddr - `ACCEL_SLOT_BASE;
wire rcnt_hit = reg_raddr >= `ACCEL_COUNTER_BASE
                && reg_raddr < `ACCEL_COUNTER_BASE + CNT_BYTES;
wire [11:0] rcnt_off = reg_raddr - `ACCEL_COUNTER_BASE;
wire [3:0]  rcnt_idx = rcnt_off[6:3];
wire [63:0] rcnt = cnt_reg[rcnt_idx];

// (looked up only for a read: not evaluated for every change of the register bus)
always @* begin
    reg_rdata = 32'd0;
    if (reg_re) begin
    case (reg_raddr)
        `REG_ACC_STATUS: begin
            reg_rdata[`ACC_STATUS_BUSY_LSB] = state_reg != S_IDLE;
            reg_rdata[`ACC_STATUS_DONE_LSB] = done_reg;
            reg_rdata[`ACC_STATUS_ERROR_LSB] = error_reg;
            reg_rdata[`ACC_STATUS_ERR_CODE_LSB +: 8] = err_code_reg;
        end
        `REG_ACC_ERR_PC: reg_rdata = err_pc_reg;
        `REG_ACC_INSN_BASE: reg_rdata = insn_base_reg;
        `REG_ACC_INSN_COUNT: reg_rdata = insn_count_reg;
        `REG_ACC_CFG_N: reg_rdata = N;
        `REG_ACC_CFG_ISA: reg_rdata = `ISA_VERSION;
        `REG_ACC_CFG_INP_DEPTH: reg_rdata = INP_DEPTH;
        `REG_ACC_CFG_WGT_DEPTH: reg_rdata = WGT_DEPTH;
        `REG_ACC_CFG_ACC_DEPTH: reg_rdata = ACC_DEPTH;
        `REG_ACC_CFG_QUEUE_DEPTH: reg_rdata = QUEUE_DEPTH;
        default: ;
    endcase
    if (rslot_hit) reg_rdata = slot_reg[rslot_off[5:2]];
    if (rcnt_hit) reg_rdata = rcnt_off[2] ? rcnt[63:32] : rcnt[31:0];
    end
end

// --- instruction queues: emptied while stopping after an error and at START ---------------------
wire q_flush = start_ok || state_reg == S_STOP;
accel_fifo #(.WIDTH(QW), .DEPTH(QUEUE_DEPTH)) q_ld (
    .clk(clk), .rst(rst), .flush(q_flush),
    .wr_en(f_push_ld), .wr_data({f_pc, f_insn}), .full(q_ld_full),
    .rd_en(ld_ready), .rd_data(q_ld_head), .rd_valid(q_ld_valid), .empty(q_ld_empty));
accel_fifo #(.WIDTH(QW), .DEPTH(QUEUE_DEPTH)) q_cp (
    .clk(clk), .rst(rst), .flush(q_flush),
    .wr_en(f_push_cp), .wr_data({f_pc, f_insn}), .full(q_cp_full),
    .rd_en(cp_ready), .rd_data(q_cp_head), .rd_valid(q_cp_valid), .empty(q_cp_empty));
accel_fifo #(.WIDTH(QW), .DEPTH(QUEUE_DEPTH)) q_st (
    .clk(clk), .rst(rst), .flush(q_flush),
    .wr_en(f_push_st), .wr_data({f_pc, f_insn}), .full(q_st_full),
    .rd_en(st_ready), .rd_data(q_st_head), .rd_valid(q_st_valid), .empty(q_st_empty));

// --- scratchpads (synchronous reads; a same-cycle write is seen the cycle after) ----------------
reg [8*N-1:0]   inp_mem [0:INP_DEPTH-1] /* verilator public_flat_rd */;
reg [8*N*N-1:0] wgt_mem [0:WGT_DEPTH-1] /* verilator public_flat_rd */;
reg [32*N-1:0]  acc_mem [0:ACC_DEPTH-1] /* verilator public_flat_rd */;

// INP is read N rows at a time (a DW iteration's taps; a GEMM reads row 0 only). In hardware it
// is N single-ported banks, row r in bank r mod N: the fetch unit lets a DW through only when
// its taps fall in distinct banks (docs/isa.md), so the N reads of a cycle never collide. A row
// not read keeps its old data, which the compute unit ignores. A transposed LOAD writes one byte
// lane of N consecutive rows, one per bank.
integer k_inp, k_tr;
always @(posedge clk) begin
    if (ld_inp_we && !ld_inp_wtr) inp_mem[ld_inp_waddr] <= ld_inp_wdata;
    if (ld_inp_we && ld_inp_wtr)
        for (k_tr = 0; k_tr < N; k_tr = k_tr + 1)
            inp_mem[ld_inp_waddr + k_tr[INP_AW-1:0]][8*ld_inp_wlane +: 8]
                <= ld_inp_wdata[8*k_tr +: 8];
    if (cp_inp_re)
        for (k_inp = 0; k_inp < N; k_inp = k_inp + 1)
            if (cp_inp_rmask[k_inp])
                cp_inp_rdata[8*N*k_inp +: 8*N] <= inp_mem[cp_inp_raddr[k_inp*INP_AW +: INP_AW]];
end

always @(posedge clk) begin
    if (ld_wgt_we) wgt_mem[ld_wgt_waddr] <= ld_wgt_wdata;
    if (cp_wgt_re) cp_wgt_rdata <= wgt_mem[cp_wgt_raddr];
end

always @(posedge clk) begin
    // two writers: the load unit and the compute unit (a race-free program never lets both
    // write one row in the same cycle; if it does, the compute unit's write lands)
    if (ld_acc_we) acc_mem[ld_acc_waddr] <= ld_acc_wdata;
    if (cp_acc_we) acc_mem[cp_acc_waddr] <= cp_acc_wdata;
    if (cp_acc_re0) cp_acc_rdata0 <= acc_mem[cp_acc_raddr0];
    if (cp_acc_re1) cp_acc_rdata1 <= acc_mem[cp_acc_raddr1];
    if (cp_acc_re2) cp_acc_rdata2 <= acc_mem[cp_acc_raddr2];
    if (st_acc_re) st_acc_rdata <= acc_mem[st_acc_raddr];
end

// --- AXI read arbiter: fetch (ID 0) and load (ID 1) share AR; R goes back by RID. A grant is
// held while the chosen ARVALID waits for ARREADY, so the address never changes under it.
reg  ar_lock_reg, ar_sel_reg, ar_last_reg;
wire ar_sel = ar_lock_reg ? ar_sel_reg
            : (f_arvalid && l_arvalid) ? !ar_last_reg : l_arvalid;
assign m_axi_arid = {{(ID_WIDTH-1){1'b0}}, ar_sel};
assign m_axi_araddr = ar_sel ? l_araddr : f_araddr;
assign m_axi_arlen = ar_sel ? l_arlen : f_arlen;
assign m_axi_arsize = AXSIZE;
assign m_axi_arburst = 2'b01;
assign m_axi_arvalid = ar_sel ? l_arvalid : f_arvalid;
assign f_arready = !ar_sel && m_axi_arready;
assign l_arready = ar_sel && m_axi_arready;

always @(posedge clk) begin
    if (m_axi_arvalid && m_axi_arready) begin
        ar_last_reg <= ar_sel;
        ar_lock_reg <= 1'b0;
    end else if (m_axi_arvalid) begin
        ar_lock_reg <= 1'b1;
        ar_sel_reg <= ar_sel;
    end
    if (rst) begin
        ar_lock_reg <= 1'b0;
        ar_sel_reg <= 1'b0;
        ar_last_reg <= 1'b0;
    end
end

wire r_to_load = m_axi_rid[0];
assign f_rvalid = m_axi_rvalid && !r_to_load;
assign l_rvalid = m_axi_rvalid && r_to_load;
assign m_axi_rready = r_to_load ? l_rready : f_rready;

assign m_axi_awid = {ID_WIDTH{1'b0}};
assign m_axi_awsize = AXSIZE;
assign m_axi_awburst = 2'b01;

// --- units ---------------------------------------------------------------------------------------
accel_fetch #(.N(N), .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(ADDR_WIDTH)) fetch (
    .clk(clk), .rst(rst),
    .start(start_ok), .insn_base(insn_base_reg), .insn_count(insn_count_reg), .stop(stop),
    .m_axi_araddr(f_araddr), .m_axi_arlen(f_arlen), .m_axi_arvalid(f_arvalid),
    .m_axi_arready(f_arready), .m_axi_rdata(m_axi_rdata), .m_axi_rresp(m_axi_rresp),
    .m_axi_rlast(m_axi_rlast), .m_axi_rvalid(f_rvalid), .m_axi_rready(f_rready),
    .q_insn(f_insn), .q_pc(f_pc),
    .q_push_load(f_push_ld), .q_push_compute(f_push_cp), .q_push_store(f_push_st),
    .q_full_load(q_ld_full), .q_full_compute(q_cp_full), .q_full_store(q_st_full),
    .ended(f_ended), .blocked(f_blocked), .idle(f_idle), .insn_pulse(f_insn_pulse),
    .err(f_err), .err_code(f_err_code), .err_pc(f_err_pc)
);

accel_load #(
    .N(N), .INP_DEPTH(INP_DEPTH), .WGT_DEPTH(WGT_DEPTH), .ACC_DEPTH(ACC_DEPTH),
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(ADDR_WIDTH)
) load (
    .clk(clk), .rst(rst),
    .insn_valid(q_ld_valid), .insn(q_ld_head[127:0]), .insn_pc(q_ld_head[QW-1:128]),
    .insn_ready(ld_ready),
    .tok_prev_avail(1'b0), .tok_next_avail(tok_c2l_reg != 8'd0),
    .tok_pop_prev(ld_pop_prev), .tok_pop_next(ld_pop_next),
    .tok_push_prev(ld_push_prev), .tok_push_next(ld_push_next),
    .stop(stop), .idle(ld_idle), .waiting(ld_waiting), .busy(ld_busy),
    .err(ld_err), .err_code(ld_err_code), .err_pc(ld_err_pc),
    .slots(slots), .bytes_valid(ld_bytes_valid), .bytes(ld_bytes),
    .m_axi_araddr(l_araddr), .m_axi_arlen(l_arlen), .m_axi_arvalid(l_arvalid),
    .m_axi_arready(l_arready), .m_axi_rdata(m_axi_rdata), .m_axi_rresp(m_axi_rresp),
    .m_axi_rlast(m_axi_rlast), .m_axi_rvalid(l_rvalid), .m_axi_rready(l_rready),
    .inp_we(ld_inp_we), .inp_waddr(ld_inp_waddr), .inp_wdata(ld_inp_wdata),
    .inp_wtr(ld_inp_wtr), .inp_wlane(ld_inp_wlane),
    .wgt_we(ld_wgt_we), .wgt_waddr(ld_wgt_waddr), .wgt_wdata(ld_wgt_wdata),
    .acc_we(ld_acc_we), .acc_waddr(ld_acc_waddr), .acc_wdata(ld_acc_wdata)
);

accel_compute #(
    .N(N), .INP_DEPTH(INP_DEPTH), .WGT_DEPTH(WGT_DEPTH), .ACC_DEPTH(ACC_DEPTH)
) compute (
    .clk(clk), .rst(rst),
    .insn_valid(q_cp_valid), .insn(q_cp_head[127:0]), .insn_pc(q_cp_head[QW-1:128]),
    .insn_ready(cp_ready),
    .tok_prev_avail(tok_l2c_reg != 8'd0), .tok_next_avail(tok_s2c_reg != 8'd0),
    .tok_pop_prev(cp_pop_prev), .tok_pop_next(cp_pop_next),
    .tok_push_prev(cp_push_prev), .tok_push_next(cp_push_next),
    .stop(stop), .idle(cp_idle), .waiting(cp_waiting), .busy(cp_busy),
    .err(cp_err), .err_code(cp_err_code), .err_pc(cp_err_pc),
    .inp_re(cp_inp_re), .inp_raddr(cp_inp_raddr), .inp_rmask(cp_inp_rmask),
    .inp_rdata(cp_inp_rdata),
    .wgt_re(cp_wgt_re), .wgt_raddr(cp_wgt_raddr), .wgt_rdata(cp_wgt_rdata),
    .acc_re0(cp_acc_re0), .acc_raddr0(cp_acc_raddr0), .acc_rdata0(cp_acc_rdata0),
    .acc_re1(cp_acc_re1), .acc_raddr1(cp_acc_raddr1), .acc_rdata1(cp_acc_rdata1),
    .acc_re2(cp_acc_re2), .acc_raddr2(cp_acc_raddr2), .acc_rdata2(cp_acc_rdata2),
    .acc_we(cp_acc_we), .acc_waddr(cp_acc_waddr), .acc_wdata(cp_acc_wdata),
    .mac_pulse(cp_mac_pulse), .mac_rows(cp_mac_rows), .gemm_busy(cp_gemm_busy)
);

accel_store #(
    .N(N), .INP_DEPTH(INP_DEPTH), .WGT_DEPTH(WGT_DEPTH), .ACC_DEPTH(ACC_DEPTH),
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(ADDR_WIDTH)
) store (
    .clk(clk), .rst(rst),
    .insn_valid(q_st_valid), .insn(q_st_head[127:0]), .insn_pc(q_st_head[QW-1:128]),
    .insn_ready(st_ready),
    .tok_prev_avail(tok_c2s_reg != 8'd0), .tok_next_avail(1'b0),
    .tok_pop_prev(st_pop_prev), .tok_pop_next(st_pop_next),
    .tok_push_prev(st_push_prev), .tok_push_next(st_push_next),
    .stop(stop), .idle(st_idle), .waiting(st_waiting), .busy(st_busy),
    .err(st_err), .err_code(st_err_code), .err_pc(st_err_pc),
    .slots(slots), .bytes_valid(st_bytes_valid), .bytes(st_bytes),
    .acc_re(st_acc_re), .acc_raddr(st_acc_raddr), .acc_rdata(st_acc_rdata),
    .m_axi_awaddr(m_axi_awaddr), .m_axi_awlen(m_axi_awlen), .m_axi_awvalid(m_axi_awvalid),
    .m_axi_awready(m_axi_awready), .m_axi_wdata(m_axi_wdata), .m_axi_wstrb(m_axi_wstrb),
    .m_axi_wlast(m_axi_wlast), .m_axi_wvalid(m_axi_wvalid), .m_axi_wready(m_axi_wready),
    .m_axi_bresp(m_axi_bresp), .m_axi_bvalid(m_axi_bvalid), .m_axi_bready(m_axi_bready)
);

// The load unit never pops or pushes "prev", the store unit never "next" (the fetch unit rejects
// such flags); their outputs are tied off inside the units. Byte-lane and ID bits not decoded:
wire unused_ok = &{1'b0, ld_pop_prev, ld_push_prev, st_pop_next, st_push_next, m_axi_bid,
                   m_axi_rid[ID_WIDTH-1:0], slot_off[11:6], slot_off[1:0], rslot_off[11:6],
                   rslot_off[1:0], rcnt_off[11:7], rcnt_off[1:0], reg_wstrb[3:1]};

endmodule

`resetall
