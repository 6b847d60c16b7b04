`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"

// Load unit: LOAD instructions, card memory -> INP, WGT or ACC scratchpad (docs/isa.md).
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
    parameter integer N = 8,                    // GEMM array size (power of two, 4N <= beat)
    parameter integer INP_DEPTH = 8192,         // INP scratchpad rows (N int8)
    parameter integer WGT_DEPTH = 1024,         // WGT scratchpad rows (N x N int8)
    parameter integer ACC_DEPTH = 4096,         // ACC scratchpad rows (N int32)
    parameter integer DATA_WIDTH = 512,         // card AXI data width
    parameter integer ADDR_WIDTH = 32,          // card AXI address width (>= 32)
    parameter integer MAX_BURST = 16,           // longest read burst (beats)
    parameter integer MAX_OUTSTANDING = 4       // read bursts in flight
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
localparam integer PAGE_BEATS = 4096 / BEAT;
localparam integer PW = $clog2(PAGE_BEATS);
localparam integer LN = $clog2(N);
localparam integer E_WGT = N * N;
localparam integer WGT_BPE = E_WGT > BEAT ? E_WGT / BEAT : 1;   // beats per WGT element
localparam integer ASM_W = WGT_BPE > 1 ? 8 * E_WGT - DATA_WIDTH : 1;
localparam [3:0]   LG_N = LN[3:0], LG_WGT = 2 * LN[3:0], LG_ACC = LN[3:0] + 4'd2;
localparam integer LW = 32 - BSH;                   // beat numbers and beat counts
localparam integer BW = 10;                         // burst lengths
localparam integer OW = $clog2(MAX_OUTSTANDING + 1);
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
    if (ADDR_WIDTH < 32) $fatal(1, "accel_load: ADDR_WIDTH must be >= 32, got %0d", ADDR_WIDTH);
    if (MAX_BURST < 1 || MAX_BURST > PAGE_BEATS || MAX_BURST > 256)
        $fatal(1, "accel_load: MAX_BURST must be 1..%0d, got %0d", PAGE_BEATS, MAX_BURST);
    if (MAX_OUTSTANDING < 1 || MAX_OUTSTANDING > 64)
        $fatal(1, "accel_load: MAX_OUTSTANDING must be 1..64, got %0d", MAX_OUTSTANDING);
    if (INP_DEPTH < 2 || WGT_DEPTH < 2 || ACC_DEPTH < 2 || INP_DEPTH > 65536
        || WGT_DEPTH > 65536 || ACC_DEPTH > 65536)
        $fatal(1, "accel_load: scratchpad depths must be 2..65536");
    if (PDW >= YW || PDW >= XW) $fatal(1, "accel_load: padding fields wider than sizes");
end

localparam [1:0] S_IDLE = 2'd0, S_HELD = 2'd1, S_RUN = 2'd2;

// --- the current instruction ---------------------------------------------------------------------
reg [1:0]   state_reg, state_next;
reg [127:0] cur_reg;
reg [31:0]  pc_reg;

wire [1:0]       c_buf = cur_reg[`F_MEM_BUF_LSB +: `F_MEM_BUF_W];
wire [3:0]       c_slot = cur_reg[`F_MEM_SLOT_LSB +: `F_MEM_SLOT_W];
wire [SBW-1:0]   c_sp = cur_reg[`F_MEM_SP_BASE_LSB +: `F_MEM_SP_BASE_W];
wire [31:0]      c_off = cur_reg[`F_MEM_OFFSET_LSB +: `F_MEM_OFFSET_W];
wire [YW-1:0]    c_y = cur_reg[`F_MEM_Y_SIZE_LSB +: `F_MEM_Y_SIZE_W];
wire [XW-1:0]    c_x = cur_reg[`F_MEM_X_SIZE_LSB +: `F_MEM_X_SIZE_W];
wire [15:0]      c_stride = cur_reg[`F_MEM_Y_STRIDE_LSB +: `F_MEM_Y_STRIDE_W];
wire [PDW-1:0]   c_pt = cur_reg[`F_MEM_PAD_TOP_LSB +: `F_MEM_PAD_TOP_W];
wire [PDW-1:0]   c_pb = cur_reg[`F_MEM_PAD_BOTTOM_LSB +: `F_MEM_PAD_BOTTOM_W];
wire [PDW-1:0]   c_pl = cur_reg[`F_MEM_PAD_LEFT_LSB +: `F_MEM_PAD_LEFT_W];
wire [PDW-1:0]   c_pr = cur_reg[`F_MEM_PAD_RIGHT_LSB +: `F_MEM_PAD_RIGHT_W];
wire [7:0]       c_pad = cur_reg[`F_MEM_PAD_VALUE_LSB +: `F_MEM_PAD_VALUE_W];
wire             c_pop = cur_reg[`F_HDR_POP_NEXT_LSB];
wire             c_push = cur_reg[`F_HDR_PUSH_NEXT_LSB];

wire c_inp = c_buf == `BUF_INP;
wire c_wgt = c_buf == `BUF_WGT;
wire c_acc8 = c_buf == `BUF_ACC8;
wire c_multi = c_wgt && WGT_BPE > 1;
wire [3:0] lg_e = c_wgt ? LG_WGT : (c_buf == `BUF_ACC ? LG_ACC : LG_N);

// tile geometry (the tile is rows x cols elements, memory rows/columns inside the padding)
wire [RW-1:0]  rows = {{(RW - PDW){1'b0}}, c_pt} + {1'b0, c_y} + {{(RW - PDW){1'b0}}, c_pb};
wire [CLW-1:0] cols = {{(CLW - PDW){1'b0}}, c_pl} + {1'b0, c_x} + {{(CLW - PDW){1'b0}}, c_pr};
wire [TW-1:0]  total = {{CLW{1'b0}}, rows} * {{RW{1'b0}}, cols};
wire [RW-1:0]  mem_r0 = {{(RW - PDW){1'b0}}, c_pt};
wire [RW-1:0]  mem_r1 = mem_r0 + {1'b0, c_y};                 // first row after memory rows
wire [CLW-1:0] mem_c0 = {{(CLW - PDW){1'b0}}, c_pl};
wire [CLW-1:0] mem_c1 = mem_c0 + {1'b0, c_x};

// memory addresses
wire [31:0] addr0 = slots[32*c_slot +: 32] + c_off;
wire [31:0] row_bytes = {{(32 - XW){1'b0}}, c_x} << lg_e;
wire [31:0] stride_bytes = {16'd0, c_stride} << lg_e;
wire [31:0] e_mask = ~(32'hFFFF_FFFF << lg_e);

// the start-cycle checks
reg [31:0] depth;
always @* begin
    case (c_buf)
        `BUF_INP: depth = INP_DEPTH;
        `BUF_WGT: depth = WGT_DEPTH;
        default:  depth = ACC_DEPTH;
    endcase
end
wire [31:0] sp_end = {{(32 - SBW){1'b0}}, c_sp} + {{(32 - TW){1'b0}}, total};
wire range_bad = total != {TW{1'b0}} && sp_end > depth;
wire align_bad = (addr0 & e_mask) != 32'd0;

wire tok_ok = !c_pop || tok_next_avail;
wire start = state_reg == S_HELD && !stop && tok_ok;

// beats a memory row covers: from its first beat, at the start and for the next row
localparam [32:0] BEAT_M1 = (33'd1 << BSH) - 33'd1;
wire [32:0] span0 = {{(33 - BSH){1'b0}}, addr0[BSH-1:0]} + {1'b0, row_bytes} + BEAT_M1;
wire [32:0] span1;      // of the row at ar_row_reg (below)

// --- request side --------------------------------------------------------------------------------
reg              ar_valid_reg, ar_valid_next;
reg [LW-1:0]     ar_addr_reg, ar_addr_next;        // beat number of the pending burst
reg [7:0]        ar_len_reg, ar_len_next;
reg [LW-1:0]     ar_beat_reg, ar_beat_next;        // next beat of the current row
reg [LW-1:0]     ar_left_reg, ar_left_next;        // beats of the current row still to request
reg [YW-1:0]     ar_rows_reg, ar_rows_next;        // memory rows after the current one
reg [31:0]       ar_row_reg, ar_row_next;          // address of the next memory row
reg [OW-1:0]     ost_reg, ost_next;                // bursts requested, last beat not yet in
assign span1 = {{(33 - BSH){1'b0}}, ar_row_reg[BSH-1:0]} + {1'b0, row_bytes} + BEAT_M1;

wire [PW:0] page_left = PAGE_BEATS[PW:0] - {1'b0, ar_beat_reg[PW-1:0]};
reg  [BW-1:0] burst;
always @* begin
    burst = MAX_BURST[BW-1:0];
    if ({{(BW - PW - 1){1'b0}}, page_left} < burst) burst = {{(BW - PW - 1){1'b0}}, page_left};
    if (ar_left_reg < {{(LW - BW){1'b0}}, burst}) burst = ar_left_reg[BW-1:0];
end

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

wire drain = drain_reg || stop;
wire [DATA_WIDTH-1:0] head = rb_mem[rb_rd_reg];
wire head_valid = rb_cnt_reg != 2'd0;
wire r_fire = m_axi_rvalid && m_axi_rready;

wire mem_row = wr_r_reg >= mem_r0 && wr_r_reg < mem_r1;
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

wire [23:0] moved = {{(24 - YW){1'b0}}, c_y} * {{(24 - XW){1'b0}}, c_x};
wire [31:0] moved_bytes = {8'd0, moved} << lg_e;

always @* begin
    state_next = state_reg;
    ar_valid_next = ar_valid_reg;
    ar_addr_next = ar_addr_reg;
    ar_len_next = ar_len_reg;
    ar_beat_next = ar_beat_reg;
    ar_left_next = ar_left_reg;
    ar_rows_next = ar_rows_reg;
    ar_row_next = ar_row_reg;
    ost_next = ost_reg;
    rb_cnt_next = rb_cnt_reg;
    drain_next = drain_reg;
    bus_err_next = bus_err_reg;
    wr_r_next = wr_r_reg;
    wr_c_next = wr_c_reg;
    wr_sp_next = wr_sp_reg;
    wr_boff_next = wr_boff_reg;
    wr_lo_next = wr_lo_reg;
    wr_sub_next = wr_sub_reg;
    push_next = 1'b0;
    bytes_valid_next = 1'b0;
    bytes_next = bytes_reg;
    err_next = 1'b0;
    err_code_next = err_code_reg;

    // address channel: a request stays until it is taken
    if (ar_valid_reg && m_axi_arready) ar_valid_next = 1'b0;
    if (state_reg == S_RUN && !drain && (!ar_valid_reg || m_axi_arready)
        && ar_left_reg != {LW{1'b0}} && ost_reg != MAX_OUTSTANDING[OW-1:0]) begin
        ar_valid_next = 1'b1;
        ar_addr_next = ar_beat_reg;
        ar_len_next = burst[7:0] - 8'd1;
        ost_next = ost_next + {{(OW-1){1'b0}}, 1'b1};
        ar_beat_next = ar_beat_reg + {{(LW - BW){1'b0}}, burst};
        ar_left_next = ar_left_reg - {{(LW - BW){1'b0}}, burst};
        if (ar_left_reg == {{(LW - BW){1'b0}}, burst} && ar_rows_reg != {YW{1'b0}}) begin
            ar_beat_next = ar_row_reg[31:BSH];
            ar_left_next = span1[BSH +: LW];
            ar_row_next = ar_row_reg + stride_bytes;
            ar_rows_next = ar_rows_reg - {{(YW-1){1'b0}}, 1'b1};
        end
    end

    // data channel
    if (r_fire) begin
        if (m_axi_rlast) ost_next = ost_next - {{(OW-1){1'b0}}, 1'b1};
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
                    ar_beat_next = addr0[31:BSH];
                    ar_row_next = addr0 + stride_bytes;
                    if (c_x != {XW{1'b0}} && c_y != {YW{1'b0}}) begin
                        ar_left_next = span0[BSH +: LW];
                        ar_rows_next = c_y - {{(YW-1){1'b0}}, 1'b1};
                    end else begin
                        ar_left_next = {LW{1'b0}};
                        ar_rows_next = {YW{1'b0}};
                    end
                    wr_r_next = {RW{1'b0}};
                    wr_c_next = {CLW{1'b0}};
                    wr_sp_next = c_sp[SPW-1:0];
                    wr_boff_next = addr0[BSH-1:0];
                    wr_lo_next = addr0[BSH-1:0];
                    wr_sub_next = 8'd0;
                end
            end
        end
        S_RUN: begin
            if (stop) drain_next = 1'b1;
            if (drain) begin
                rb_cnt_next = 2'd0;
                if (ost_reg == {OW{1'b0}}) begin
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
    wgt_we_reg <= w_fire && c_wgt;
    acc_we_reg <= w_fire && !c_inp && !c_wgt;
    waddr_reg <= wr_sp_reg;
    inp_wd_reg <= is_mem ? el_inp : {N{c_pad}};
    wgt_wd_reg <= is_mem ? el_wgt : {(N*N){c_pad}};
    acc_wd_reg <= is_mem ? el_acc : {N{{24{c_pad[7]}}, c_pad}};
    if (start) err_pc_reg <= pc_reg;

    state_reg <= state_next;
    ar_valid_reg <= ar_valid_next;
    ar_addr_reg <= ar_addr_next;
    ar_len_reg <= ar_len_next;
    ar_beat_reg <= ar_beat_next;
    ar_left_reg <= ar_left_next;
    ar_rows_reg <= ar_rows_next;
    ar_row_reg <= ar_row_next;
    ost_reg <= ost_next;
    rb_cnt_reg <= rb_cnt_next;
    drain_reg <= drain_next;
    bus_err_reg <= bus_err_next;
    wr_r_reg <= wr_r_next;
    wr_c_reg <= wr_c_next;
    wr_sp_reg <= wr_sp_next;
    wr_boff_reg <= wr_boff_next;
    wr_lo_reg <= wr_lo_next;
    wr_sub_reg <= wr_sub_next;
    push_reg <= push_next;
    bytes_valid_reg <= bytes_valid_next;
    bytes_reg <= bytes_next;
    err_reg <= err_next;
    err_code_reg <= err_code_next;

    if (rst) begin
        state_reg <= S_IDLE;
        ar_valid_reg <= 1'b0;
        ar_left_reg <= {LW{1'b0}};
        ar_rows_reg <= {YW{1'b0}};
        ost_reg <= {OW{1'b0}};
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
wire [31:0] ar_byte_addr = {ar_addr_reg, {BSH{1'b0}}};
generate if (ADDR_WIDTH > 32) begin : g_wide
    assign m_axi_araddr = {{(ADDR_WIDTH - 32){1'b0}}, ar_byte_addr};
end else begin : g_narrow
    assign m_axi_araddr = ar_byte_addr;
end endgenerate
assign m_axi_arlen = ar_len_reg;
assign m_axi_arvalid = ar_valid_reg;
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
assign wgt_we = wgt_we_reg;
assign wgt_waddr = waddr_reg[WGT_AW-1:0];
assign wgt_wdata = wgt_wd_reg;
assign acc_we = acc_we_reg;
assign acc_waddr = waddr_reg[ACC_AW-1:0];
assign acc_wdata = acc_wd_reg;

// The load unit has no "prev" queue (the fetch unit rejects those flags); a LOAD's other header
// bits are not its business either. Row spans are used from the beat bit up; a small N uses only
// the low bits of the shifted beat.
wire unused_ok = &{1'b0, tok_prev_avail, cur_reg[`F_HDR_OPCODE_LSB +: 4],
                   cur_reg[`F_HDR_POP_PREV_LSB], cur_reg[`F_HDR_PUSH_PREV_LSB],
                   cur_reg[127:`F_MEM_PAD_VALUE_LSB + `F_MEM_PAD_VALUE_W], asm_reg[0],
                   span0[32], span0[BSH-1:0], span1[32], span1[BSH-1:0], shifted};

endmodule

`resetall
