`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"
`include "accel_cfg.vh"

// Load unit: LOAD instructions, card memory -> INP, WGT or ACC scratchpad (docs/isa.md).
// A transposed LOAD (INP, no padding, y_size a multiple of N: the fetch unit checks) walks the
// memory the same way and writes each element as one column of the N rows its N x N block
// transposes to: its bytes go to rows (Y * x_size + x) * N + k from sp_base, k = 0..N-1, at
// byte y mod N (inp_wtr, inp_wlane).
//
// An instruction is taken from the queue head when the unit is idle, waits for its pop token,
// and in its start cycle pops the token and checks the scratchpad range (SP_RANGE) and the
// address alignment (MISALIGNED). It then runs two engines:
//  - the request side walks the memory rows and issues INCR bursts (at most MAX_BURST beats,
//    never across 4 KiB, at most MAX_OUTSTANDING in flight) covering each row's bytes;
//  - the write side walks the padded tile row-major, one scratchpad row per cycle: padding
//    elements need no data, memory elements are cut from the head of a two-beat R buffer (an
//    element is E = N, N*N, 4N or N bytes, aligned to E, so it never straddles a beat unless it
//    is larger than a beat, in which case E/beat whole beats are collected).
// The push token is given with the last scratchpad write. An R beat with RRESP != OKAY, or
// `stop`, ends the writes; the bursts in flight are drained; then LOAD_BUS is reported (not for
// `stop`) and the unit is idle.
module accel_load #(
    parameter integer N = `ACCEL_N,                                 // array size (2^k, 4N <= beat)
    parameter integer INP_DEPTH = `ACCEL_INP_DEPTH,                 // INP rows (N int8)
    parameter integer WGT_DEPTH = `ACCEL_WGT_DEPTH,                 // WGT rows (N x N int8)
    parameter integer ACC_DEPTH = `ACCEL_ACC_DEPTH,                 // ACC rows (N int32)
    parameter integer DATA_WIDTH = `ACCEL_DATA_WIDTH,               // card AXI data width
    parameter integer ADDR_WIDTH = 32,                              // AXI address width (>= 32)
    parameter integer MAX_BURST = `ACCEL_MEM_MAX_BURST,             // longest read burst (beats)
    parameter integer MAX_OUTSTANDING = `ACCEL_MEM_MAX_OUTSTANDING, // read bursts in flight
    parameter integer LNW = N > 1 ? $clog2(N) : 1                   // (a byte lane of a row)
) (
    input  wire                     clk,
    input  wire                     rst,

    // instruction queue head and dependency tokens
    input  wire                     insn_valid,
    input  wire [127:0]             insn,
    input  wire [31:0]              insn_pc,
    output wire                     insn_ready,
    input  wire                     tok_prev_avail,
    input  wire                     tok_next_avail,
    output wire                     tok_pop_prev,
    output wire                     tok_pop_next,
    output wire                     tok_push_prev,
    output wire                     tok_push_next,

    // status
    input  wire                     stop,
    output wire                     idle,
    output wire                     waiting,
    output wire                     busy,
    output wire                     err,
    output wire [7:0]               err_code,
    output wire [31:0]              err_pc,
    input  wire [16*32-1:0]         slots,
    output wire                     bytes_valid,
    output wire [31:0]              bytes,

    // AXI4 read channels (ID, size and burst type are set by the top)
    output wire [ADDR_WIDTH-1:0]    m_axi_araddr,
    output wire [7:0]               m_axi_arlen,
    output wire                     m_axi_arvalid,
    input  wire                     m_axi_arready,
    input  wire [DATA_WIDTH-1:0]    m_axi_rdata,
    input  wire [1:0]               m_axi_rresp,
    input  wire                     m_axi_rlast,
    input  wire                     m_axi_rvalid,
    output wire                     m_axi_rready,

    // scratchpad write ports
    output wire                     inp_we,
    output wire [$clog2(INP_DEPTH)-1:0] inp_waddr,
    output wire [8*N-1:0]           inp_wdata,
    // a transposed LOAD's write: byte k of inp_wdata goes to byte inp_wlane of row
    // inp_waddr + k, k = 0..N-1 (N rows in N different banks)
    output wire                     inp_wtr,
    output wire [LNW-1:0]           inp_wlane,
    output wire                     wgt_we,
    output wire [$clog2(WGT_DEPTH)-1:0] wgt_waddr,
    output wire [8*N*N-1:0]         wgt_wdata,
    output wire                     acc_we,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_waddr,
    output wire [32*N-1:0]          acc_wdata
);

// --- geometry ------------------------------------------------------------------------------------
localparam integer BEAT = DATA_WIDTH / 8;           // bytes per beat
localparam integer INP_AW = $clog2(INP_DEPTH);
localparam integer WGT_AW = $clog2(WGT_DEPTH);
localparam integer ACC_AW = $clog2(ACC_DEPTH);
localparam integer BSH = $clog2(BEAT);
localparam integer LN = $clog2(N);
localparam integer E_WGT = N * N;
localparam integer WGT_BPE = E_WGT > BEAT ? E_WGT / BEAT : 1;   // beats per WGT element
localparam integer ASM_W = WGT_BPE > 1 ? 8 * E_WGT - DATA_WIDTH : 1;
localparam integer SPW = INP_AW > WGT_AW ? (INP_AW > ACC_AW ? INP_AW : ACC_AW)
                                         : (WGT_AW > ACC_AW ? WGT_AW : ACC_AW);
localparam integer YW = `F_MEM_Y_SIZE_W;
localparam integer XW = `F_MEM_X_SIZE_W;
localparam integer PDW = `F_MEM_PAD_TOP_W;
localparam integer RW = YW + 1;                     // padded rows
localparam integer CLW = XW + 1;                    // padded columns
localparam integer TW = RW + CLW;                   // padded elements
localparam integer SBW = `F_MEM_SP_BASE_W;

initial begin
    if (N < 1 || (1 << LN) != N || 4 * N > BEAT)
        $fatal(1, "accel_load: N must be a power of two with 4N <= DATA_WIDTH/8, got %0d", N);
    if ((1 << BSH) != BEAT || BEAT < 16 || BEAT > 4096)
        $fatal(1, "accel_load: DATA_WIDTH must be a power of two, 128..32768, got %0d",
               DATA_WIDTH);
    if (INP_DEPTH < 2 || WGT_DEPTH < 2 || ACC_DEPTH < 2 || INP_DEPTH > 65536
        || WGT_DEPTH > 65536 || ACC_DEPTH > 65536)
        $fatal(1, "accel_load: scratchpad depths must be 2..65536");
end

localparam [1:0] S_IDLE = 2'd0, S_HELD = 2'd1, S_RUN = 2'd2;

// --- the current instruction ---------------------------------------------------------------------
reg [1:0]   state_reg, state_next;
reg [127:0] cur_reg;
reg [31:0]  pc_reg;

wire [1:0]       c_buf;
wire [SBW-1:0]   c_sp;
wire [YW-1:0]    c_y;
wire [XW-1:0]    c_x;
wire [PDW-1:0]   c_pt, c_pl;
wire [7:0]       c_pad;
wire [3:0]       lg_e;
wire [RW-1:0]    rows;                              // the tile is rows x cols elements
wire [CLW-1:0]   cols;
wire [TW-1:0]    total;
wire [31:0]      addr0, row_bytes, stride_bytes, moved_bytes;
wire             range_bad, align_bad;
wire             c_pop = cur_reg[`F_HDR_POP_NEXT_LSB];
wire             c_push = cur_reg[`F_HDR_PUSH_NEXT_LSB];

accel_mem_decode #(
    .N(N), .INP_DEPTH(INP_DEPTH), .WGT_DEPTH(WGT_DEPTH), .ACC_DEPTH(ACC_DEPTH), .STORE(0)
) u_decode (
    .insn(cur_reg), .slots(slots),
    .buf_sel(c_buf), .sp_base(c_sp), .y_size(c_y), .x_size(c_x), .pad_top(c_pt),
    .pad_left(c_pl), .pad_value(c_pad), .lg_e(lg_e), .rows(rows), .cols(cols), .total(total),
    .addr0(addr0), .row_bytes(row_bytes), .stride_bytes(stride_bytes),
    .moved_bytes(moved_bytes), .range_bad(range_bad), .align_bad(align_bad)
);

wire c_inp = c_buf == `BUF_INP;
wire c_tr = cur_reg[`F_MEM_TRANSPOSE_LSB];
wire c_wgt = c_buf == `BUF_WGT;
wire c_acc8 = c_buf == `BUF_ACC8;
wire c_multi = c_wgt && WGT_BPE > 1;

// memory rows/columns of the tile (inside the padding)
wire [RW-1:0]  mem_r0 = {{(RW - PDW){1'b0}}, c_pt};
wire [RW-1:0]  mem_r1 = mem_r0 + {1'b0, c_y};                 // first row after memory rows
wire [CLW-1:0] mem_c0 = {{(CLW - PDW){1'b0}}, c_pl};
wire [CLW-1:0] mem_c1 = mem_c0 + {1'b0, c_x};

wire tok_ok = !c_pop || tok_next_avail;
wire start = state_reg == S_HELD && !stop && tok_ok;
wire start_run = start && !range_bad && !align_bad && total != {TW{1'b0}};

// --- R buffer (two beats) and write side ---------------------------------------------------------
reg [DATA_WIDTH-1:0] rb_mem [0:1];
reg                  rb_wr_reg, rb_rd_reg;
reg [1:0]            rb_cnt_reg, rb_cnt_next;
reg                  drain_reg, drain_next;        // stop writing, accept and drop R beats
reg                  bus_err_reg, bus_err_next;

reg [RW-1:0]   wr_r_reg, wr_r_next;                // tile position of the next write
reg [CLW-1:0]  wr_c_reg, wr_c_next;
reg [SPW-1:0]  wr_sp_reg, wr_sp_next;              // its scratchpad row
reg [BSH-1:0]  wr_boff_reg, wr_boff_next;          // byte of the next memory element in a beat
reg [BSH-1:0]  wr_lo_reg, wr_lo_next;              // byte of the current memory row's start
reg [7:0]      wr_sub_reg, wr_sub_next;            // beats of a multi-beat element collected
reg [SPW-1:0]  tr_base_reg, tr_base_next;          // transposed: the row group's first row

wire drain = drain_reg || stop;
wire [DATA_WIDTH-1:0] head = rb_mem[rb_rd_reg];
wire head_valid = rb_cnt_reg != 2'd0;
wire r_fire = m_axi_rvalid && m_axi_rready;

// --- request side --------------------------------------------------------------------------------
wire ar_all;            // every burst requested (unused: the write side ends the instruction)
wire ost_none;          // no burst in flight
accel_burst_walker #(
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(ADDR_WIDTH), .MAX_BURST(MAX_BURST),
    .MAX_OUTSTANDING(MAX_OUTSTANDING), .ROWS_W(YW)
) u_ar (
    .clk(clk), .rst(rst),
    .start(start_run), .start_addr(addr0), .start_rows(c_x != {XW{1'b0}} ? c_y : {YW{1'b0}}),
    .row_bytes(row_bytes), .stride_bytes(stride_bytes),
    .enable(state_reg == S_RUN && !drain), .burst_done(r_fire && m_axi_rlast),
    .requested(ar_all), .none_outstanding(ost_none),
    .a_addr(m_axi_araddr), .a_len(m_axi_arlen), .a_valid(m_axi_arvalid), .a_ready(m_axi_arready)
);

wire mem_row = wr_r_reg >= mem_r0 && wr_r_reg < mem_r1;
localparam integer N_I = N;
localparam [SPW-1:0] N_SP = N_I[SPW-1:0];
localparam [RW-1:0] N_R = N_I[RW-1:0];
// transposed (no padding: the tile row is the memory row y): y mod N, and the group's last row
wire [RW-1:0]  tr_lane_r = wr_r_reg & (N_R - {{(RW-1){1'b0}}, 1'b1});
wire           tr_group_end = tr_lane_r == N_R - {{(RW-1){1'b0}}, 1'b1};
wire is_mem = mem_row && wr_c_reg >= mem_c0 && wr_c_reg < mem_c1;
wire row_end = wr_c_reg == cols - {{(CLW-1){1'b0}}, 1'b1};
wire tile_end = row_end && wr_r_reg == rows - {{(RW-1){1'b0}}, 1'b1};
wire row_last_mem = wr_c_reg == mem_c1 - {{(CLW-1){1'b0}}, 1'b1};
wire [BSH:0] boff_sum = {1'b0, wr_boff_reg} + ({{BSH{1'b0}}, 1'b1} << lg_e);
wire [BSH-1:0] stride_lo = stride_bytes[BSH-1:0];

// this cycle's write: a padding element, or a memory element whose data is at the head
wire run_w = state_reg == S_RUN && !drain;
wire sub_last = wr_sub_reg == WGT_BPE[7:0] - 8'd1;
wire w_fire = run_w && (!is_mem || head_valid) && (!is_mem || !c_multi || sub_last);
wire rb_pop = run_w && is_mem && head_valid && (c_multi || boff_sum[BSH] || row_last_mem);

// element data cut from the head beat
wire [DATA_WIDTH-1:0] shifted = head >> {wr_boff_reg, 3'b000};
wire [8*N-1:0]        el_inp = shifted[8*N-1:0];
wire [32*N-1:0]       el_acc;
wire [8*N*N-1:0]      el_wgt;
genvar gl;
generate
    for (gl = 0; gl < N; gl = gl + 1) begin : g_lane
        assign el_acc[32*gl +: 32] = c_acc8 ? {{24{shifted[8*gl+7]}}, shifted[8*gl +: 8]}
                                            : shifted[32*gl +: 32];
    end
endgenerate

reg [ASM_W-1:0] asm_reg;        // the first WGT_BPE-1 beats of a multi-beat element
generate if (WGT_BPE > 1) begin : g_multi
    wire [ASM_W+DATA_WIDTH-1:0] asm_cat = {head, asm_reg};
    assign el_wgt = asm_cat;
    always @(posedge clk) begin
        if (run_w && is_mem && head_valid && c_multi)
            asm_reg <= asm_cat[ASM_W+DATA_WIDTH-1:DATA_WIDTH];
    end
end else begin : g_single
    assign el_wgt = shifted[8*N*N-1:0];
    always @(posedge clk) asm_reg <= 1'b0;
end endgenerate

// --- registered outputs ---------------------------------------------------------------------
reg                inp_we_reg, wgt_we_reg, acc_we_reg;
reg                inp_tr_reg;
reg [LNW-1:0]      inp_lane_reg;
reg [SPW-1:0]      waddr_reg;
reg [8*N-1:0]      inp_wd_reg;
reg [8*N*N-1:0]    wgt_wd_reg;
reg [32*N-1:0]     acc_wd_reg;
reg                push_reg, push_next;
reg                bytes_valid_reg, bytes_valid_next;
reg [31:0]         bytes_reg, bytes_next;
reg                err_reg, err_next;
reg [7:0]          err_code_reg, err_code_next;
reg [31:0]         err_pc_reg;

always @* begin
    state_next = state_reg;
    rb_cnt_next = rb_cnt_reg;
    drain_next = drain_reg;
    bus_err_next = bus_err_reg;
    wr_r_next = wr_r_reg;
    wr_c_next = wr_c_reg;
    wr_sp_next = wr_sp_reg;
    wr_boff_next = wr_boff_reg;
    wr_lo_next = wr_lo_reg;
    wr_sub_next = wr_sub_reg;
    tr_base_next = tr_base_reg;
    push_next = 1'b0;
    bytes_valid_next = 1'b0;
    bytes_next = bytes_reg;
    err_next = 1'b0;
    err_code_next = err_code_reg;

    // data channel
    if (r_fire) begin
        if (m_axi_rresp != 2'b00 && state_reg == S_RUN) begin
            bus_err_next = 1'b1;
            drain_next = 1'b1;
        end
        if (!drain) rb_cnt_next = rb_cnt_next + 2'd1;
    end
    if (rb_pop) rb_cnt_next = rb_cnt_next - 2'd1;

    // write side
    if (run_w && is_mem && head_valid && c_multi)
        wr_sub_next = sub_last ? 8'd0 : wr_sub_reg + 8'd1;
    if (run_w && is_mem && head_valid && !c_multi)
        wr_boff_next = boff_sum[BSH-1:0];
    if (w_fire) begin
        wr_sp_next = wr_sp_reg + {{(SPW-1){1'b0}}, 1'b1};
        if (c_tr) begin
            // element (y, x) -> rows from tr_base + x * N; the next row group starts after
            // the last element of its N-th memory row
            wr_sp_next = wr_sp_reg + N_SP;
            if (row_end && !tr_group_end)
                wr_sp_next = tr_base_reg;
            if (row_end && tr_group_end)
                tr_base_next = wr_sp_reg + N_SP;
        end
        wr_c_next = wr_c_reg + {{(CLW-1){1'b0}}, 1'b1};
        if (row_end) begin
            wr_c_next = {CLW{1'b0}};
            wr_r_next = wr_r_reg + {{(RW-1){1'b0}}, 1'b1};
            if (mem_row) begin
                wr_lo_next = wr_lo_reg + stride_lo;
                wr_boff_next = wr_lo_reg + stride_lo;
            end
        end
    end

    case (state_reg)
        S_IDLE: if (insn_valid && !stop) state_next = S_HELD;
        S_HELD: begin
            if (stop) begin
                state_next = S_IDLE;
            end else if (start) begin
                if (range_bad || align_bad) begin
                    err_next = 1'b1;
                    err_code_next = range_bad ? `ACC_ERR_SP_RANGE : `ACC_ERR_MISALIGNED;
                    state_next = S_IDLE;
                end else if (total == {TW{1'b0}}) begin
                    push_next = c_push;
                    bytes_valid_next = 1'b1;
                    bytes_next = moved_bytes;
                    state_next = S_IDLE;
                end else begin
                    state_next = S_RUN;
                    drain_next = 1'b0;
                    bus_err_next = 1'b0;
                    rb_cnt_next = 2'd0;
                    wr_r_next = {RW{1'b0}};
                    wr_c_next = {CLW{1'b0}};
                    wr_sp_next = c_sp[SPW-1:0];
                    wr_boff_next = addr0[BSH-1:0];
                    wr_lo_next = addr0[BSH-1:0];
                    wr_sub_next = 8'd0;
                    tr_base_next = c_sp[SPW-1:0];
                end
            end
        end
        S_RUN: begin
            if (stop) drain_next = 1'b1;
            if (drain) begin
                rb_cnt_next = 2'd0;
                if (ost_none) begin
                    state_next = S_IDLE;
                    if (bus_err_reg) begin
                        err_next = 1'b1;
                        err_code_next = `ACC_ERR_LOAD_BUS;
                    end
                end
            end else if (w_fire && tile_end) begin
                push_next = c_push;
                bytes_valid_next = 1'b1;
                bytes_next = moved_bytes;
                state_next = S_IDLE;
            end
        end
        default: state_next = S_IDLE;
    endcase
end

always @(posedge clk) begin
    if (state_reg == S_IDLE && insn_valid && !stop) begin
        cur_reg <= insn;
        pc_reg <= insn_pc;
    end
    if (r_fire && !drain) begin
        rb_mem[rb_wr_reg] <= m_axi_rdata;
        rb_wr_reg <= !rb_wr_reg;
    end
    if (rb_pop) rb_rd_reg <= !rb_rd_reg;
    if (start || drain) begin
        rb_wr_reg <= 1'b0;
        rb_rd_reg <= 1'b0;
    end

    inp_we_reg <= w_fire && c_inp;
    inp_tr_reg <= c_tr;
    inp_lane_reg <= tr_lane_r[LNW-1:0];
    wgt_we_reg <= w_fire && c_wgt;
    acc_we_reg <= w_fire && !c_inp && !c_wgt;
    waddr_reg <= wr_sp_reg;
    inp_wd_reg <= is_mem ? el_inp : {N{c_pad}};
    wgt_wd_reg <= is_mem ? el_wgt : {(N*N){c_pad}};
    acc_wd_reg <= is_mem ? el_acc : {N{{24{c_pad[7]}}, c_pad}};
    if (start) err_pc_reg <= pc_reg;

    state_reg <= state_next;
    rb_cnt_reg <= rb_cnt_next;
    drain_reg <= drain_next;
    bus_err_reg <= bus_err_next;
    wr_r_reg <= wr_r_next;
    wr_c_reg <= wr_c_next;
    wr_sp_reg <= wr_sp_next;
    wr_boff_reg <= wr_boff_next;
    wr_lo_reg <= wr_lo_next;
    wr_sub_reg <= wr_sub_next;
    tr_base_reg <= tr_base_next;
    push_reg <= push_next;
    bytes_valid_reg <= bytes_valid_next;
    bytes_reg <= bytes_next;
    err_reg <= err_next;
    err_code_reg <= err_code_next;

    if (rst) begin
        state_reg <= S_IDLE;
        rb_cnt_reg <= 2'd0;
        rb_wr_reg <= 1'b0;
        rb_rd_reg <= 1'b0;
        drain_reg <= 1'b0;
        bus_err_reg <= 1'b0;
        inp_we_reg <= 1'b0;
        wgt_we_reg <= 1'b0;
        acc_we_reg <= 1'b0;
        push_reg <= 1'b0;
        bytes_valid_reg <= 1'b0;
        bytes_reg <= 32'd0;
        err_reg <= 1'b0;
        err_code_reg <= `ACC_ERR_NONE;
        err_pc_reg <= 32'd0;
    end
end

// --- outputs -------------------------------------------------------------------------------------
assign m_axi_rready = drain || rb_cnt_reg != 2'd2;

assign insn_ready = state_reg == S_IDLE && !stop;
assign tok_pop_prev = 1'b0;
assign tok_pop_next = start && c_pop;
assign tok_push_prev = 1'b0;
assign tok_push_next = push_reg;

assign idle = state_reg == S_IDLE;
assign waiting = state_reg == S_HELD && !tok_ok;
assign busy = state_reg == S_RUN;
assign err = err_reg;
assign err_code = err_code_reg;
assign err_pc = err_pc_reg;
assign bytes_valid = bytes_valid_reg;
assign bytes = bytes_reg;

assign inp_we = inp_we_reg;
assign inp_waddr = waddr_reg[INP_AW-1:0];
assign inp_wdata = inp_wd_reg;
assign inp_wtr = inp_tr_reg;
assign inp_wlane = inp_lane_reg;
assign wgt_we = wgt_we_reg;
assign wgt_waddr = waddr_reg[WGT_AW-1:0];
assign wgt_wdata = wgt_wd_reg;
assign acc_we = acc_we_reg;
assign acc_waddr = waddr_reg[ACC_AW-1:0];
assign acc_wdata = acc_wd_reg;

// The load unit has no "prev" queue (the fetch unit rejects those flags); a LOAD's other header
// bits are not its business either. The write side, not the request side, ends an instruction;
// a small scratchpad uses only the low bits of sp_base, a small N only the low bits of the
// shifted beat.
wire unused_ok = &{1'b0, tok_prev_avail, ar_all, c_sp, asm_reg[0], shifted};

endmodule

`resetall
