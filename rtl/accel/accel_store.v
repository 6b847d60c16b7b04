`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"
`include "accel_cfg.vh"

// Store unit: STORE instructions, ACC scratchpad -> card memory (docs/isa.md).
//
// An instruction is taken from the queue head when the unit is idle, waits for its pop token,
// and in its start cycle pops the token and checks the scratchpad range (SP_RANGE) and the
// address alignment (MISALIGNED). It then runs three engines:
//  - the request side walks the memory rows and issues INCR write bursts (at most MAX_BURST
//    beats, never across 4 KiB, at most MAX_OUTSTANDING awaiting their B response);
//  - the reader streams ACC rows sp_base, sp_base+1, ... one per cycle into a small element
//    buffer (the scratchpad read is synchronous, so reads are issued against free room);
//  - the packer places each element (ACC: the N int32 lanes, ACC8: the low byte of each lane)
//    at its byte offset in the current beat with its strobes, and sends the beat on W when it is
//    full or the row ends; W beats of a burst follow the burst's accepted AW.
// The push token is given after the last B response. A B response with BRESP != OKAY, or `stop`,
// ends the requests; the W beats of issued bursts are sent and every B is taken; then STORE_BUS
// is reported (not for `stop`) and the unit is idle.
module accel_store #(
    parameter integer N = `ACCEL_N,                                 // array size (2^k, 4N <= beat)
    parameter integer INP_DEPTH = `ACCEL_INP_DEPTH,                 // INP rows (unused here)
    parameter integer WGT_DEPTH = `ACCEL_WGT_DEPTH,                 // WGT rows (unused here)
    parameter integer ACC_DEPTH = `ACCEL_ACC_DEPTH,                 // ACC rows (N int32)
    parameter integer DATA_WIDTH = `ACCEL_DATA_WIDTH,               // card AXI data width
    parameter integer ADDR_WIDTH = 32,                              // AXI address width (>= 32)
    parameter integer MAX_BURST = `ACCEL_MEM_MAX_BURST,             // longest write burst (beats)
    parameter integer MAX_OUTSTANDING = `ACCEL_MEM_MAX_OUTSTANDING  // write bursts awaiting B
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

    // ACC scratchpad read port (data the cycle after acc_re)
    output wire                     acc_re,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_raddr,
    input  wire [32*N-1:0]          acc_rdata,

    // AXI4 write channels (ID, size and burst type are set by the top)
    output wire [ADDR_WIDTH-1:0]    m_axi_awaddr,
    output wire [7:0]               m_axi_awlen,
    output wire                     m_axi_awvalid,
    input  wire                     m_axi_awready,
    output wire [DATA_WIDTH-1:0]    m_axi_wdata,
    output wire [DATA_WIDTH/8-1:0]  m_axi_wstrb,
    output wire                     m_axi_wlast,
    output wire                     m_axi_wvalid,
    input  wire                     m_axi_wready,
    input  wire [1:0]               m_axi_bresp,
    input  wire                     m_axi_bvalid,
    output wire                     m_axi_bready
);

// --- geometry ------------------------------------------------------------------------------------
localparam integer BEAT = DATA_WIDTH / 8;           // bytes per beat
localparam integer ACC_AW = $clog2(ACC_DEPTH);
localparam integer BSH = $clog2(BEAT);
localparam integer LN = $clog2(N);
localparam integer LFA = MAX_OUTSTANDING > 2 ? $clog2(MAX_OUTSTANDING) : 1;  // burst FIFO
localparam integer EFD = 4;                         // element buffer entries
localparam integer YW = `F_MEM_Y_SIZE_W;
localparam integer XW = `F_MEM_X_SIZE_W;
localparam integer TW = YW + XW;                    // elements
localparam integer DTW = TW + 2;                    // elements as the decoder counts them
localparam integer SBW = `F_MEM_SP_BASE_W;

initial begin
    if (N < 1 || (1 << LN) != N || 4 * N > BEAT)
        $fatal(1, "accel_store: N must be a power of two with 4N <= DATA_WIDTH/8, got %0d", N);
    if ((1 << BSH) != BEAT || BEAT < 16 || BEAT > 4096)
        $fatal(1, "accel_store: DATA_WIDTH must be a power of two, 128..32768, got %0d",
               DATA_WIDTH);
    if (ACC_DEPTH < 2 || ACC_DEPTH > 65536)
        $fatal(1, "accel_store: ACC_DEPTH must be 2..65536, got %0d", ACC_DEPTH);
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
wire [3:0]       lg_e;
wire [DTW-1:0]   total;
wire [31:0]      addr0, row_bytes, stride_bytes, moved_bytes;
wire             range_bad, align_bad;
wire             c_pop = cur_reg[`F_HDR_POP_PREV_LSB];
wire             c_push = cur_reg[`F_HDR_PUSH_PREV_LSB];
// unused: a STORE has no padding
wire [`F_MEM_PAD_TOP_W-1:0] c_pt, c_pl;
wire [7:0]       c_pad;
wire [YW:0]      c_rows;
wire [XW:0]      c_cols;

// The fetch unit only lets ACC and ACC8 through; anything but ACC8 is stored as ACC.
accel_mem_decode #(
    .N(N), .INP_DEPTH(INP_DEPTH), .WGT_DEPTH(WGT_DEPTH), .ACC_DEPTH(ACC_DEPTH), .STORE(1)
) u_decode (
    .insn(cur_reg), .slots(slots),
    .buf_sel(c_buf), .sp_base(c_sp), .y_size(c_y), .x_size(c_x), .pad_top(c_pt),
    .pad_left(c_pl), .pad_value(c_pad), .lg_e(lg_e), .rows(c_rows), .cols(c_cols),
    .total(total), .addr0(addr0), .row_bytes(row_bytes), .stride_bytes(stride_bytes),
    .moved_bytes(moved_bytes), .range_bad(range_bad), .align_bad(align_bad)
);
wire c_acc8 = c_buf == `BUF_ACC8;

wire tok_ok = !c_pop || tok_prev_avail;
wire start = state_reg == S_HELD && !stop && tok_ok;
wire start_run = start && !range_bad && !align_bad && total != {DTW{1'b0}};

// --- request side --------------------------------------------------------------------------------
wire [7:0] aw_len;
wire       aw_valid;
wire       aw_all;          // every burst requested
wire       ost_none;        // no burst awaiting its B response
// (the burst walker is instantiated below, after `drain`)

// lengths (AWLEN) of the accepted bursts whose W beats are not all sent
reg [7:0]     lf_mem [0:(1 << LFA)-1];
reg [LFA-1:0] lf_wr_reg, lf_rd_reg;
reg [LFA:0]   lf_cnt_reg, lf_cnt_next;
wire [7:0]    lf_head = lf_mem[lf_rd_reg];
wire          lf_push = aw_valid && m_axi_awready;

// --- reader: ACC rows into the element buffer ----------------------------------------------------
reg [TW-1:0]     rd_left_reg, rd_left_next;        // rows still to read
reg [ACC_AW-1:0] rd_sp_reg, rd_sp_next;
reg              rd_fly_reg;                       // a read was issued last cycle
reg [32*N-1:0]   ef_mem [0:EFD-1];
reg [1:0]        ef_wr_reg, ef_rd_reg;
reg [2:0]        ef_cnt_reg, ef_cnt_next;
wire rd_go = state_reg == S_RUN && rd_left_reg != {TW{1'b0}}
             && ef_cnt_reg + {2'b00, rd_fly_reg} < EFD[2:0];

// --- packer and W output -------------------------------------------------------------------------
reg [DATA_WIDTH-1:0] pk_data_reg, pk_data_next;    // the beat being filled
reg [BEAT-1:0]       pk_strb_reg, pk_strb_next;
reg [XW-1:0]         pk_x_reg, pk_x_next;          // element of the memory row
reg [BSH-1:0]        pk_boff_reg, pk_boff_next;    // its byte in the beat
reg [BSH-1:0]        pk_lo_reg, pk_lo_next;        // byte of the memory row's start
reg [7:0]            wb_cnt_reg, wb_cnt_next;      // beats of the current burst sent
reg                  w_valid_reg, w_valid_next;
reg [DATA_WIDTH-1:0] w_data_reg, w_data_next;
reg [BEAT-1:0]       w_strb_reg, w_strb_next;
reg                  w_last_reg, w_last_next;

wire [32*N-1:0] el = ef_mem[ef_rd_reg];
wire            el_valid = ef_cnt_reg != 3'd0;
reg  [32*N-1:0] ins;            // the element's bytes as they go to memory (low bytes)
integer li;
always @* begin
    ins = el;
    if (c_acc8) begin
        ins = {(32*N){1'b0}};
        for (li = 0; li < N; li = li + 1) ins[8*li +: 8] = el[32*li +: 8];
    end
end
wire [DATA_WIDTH-1:0] ins_w;
generate if (32 * N < DATA_WIDTH) begin : g_pad
    assign ins_w = {{(DATA_WIDTH - 32 * N){1'b0}}, ins};
end else begin : g_full
    assign ins_w = ins;
end endgenerate
wire [DATA_WIDTH-1:0] placed = ins_w << {pk_boff_reg, 3'b000};
wire [BEAT-1:0]       e_strb = ~({BEAT{1'b1}} << ({{(32 - 4){1'b0}}, 4'd1} << lg_e));
wire [BEAT-1:0]       placed_strb = e_strb << pk_boff_reg;
wire [BSH:0]          boff_sum = {1'b0, pk_boff_reg} + ({{BSH{1'b0}}, 1'b1} << lg_e);
wire                  row_last = pk_x_reg == c_x - {{(XW-1){1'b0}}, 1'b1};
wire                  beat_done = boff_sum[BSH] || row_last;
wire                  w_room = (!w_valid_reg || m_axi_wready) && lf_cnt_reg != {(LFA+1){1'b0}};
wire                  pk_fire = state_reg == S_RUN && el_valid && (!beat_done || w_room);
wire                  lf_pop = pk_fire && beat_done && wb_cnt_reg == lf_head;
wire [BSH-1:0]        stride_lo = stride_bytes[BSH-1:0];

// --- status outputs ------------------------------------------------------------------------------
reg         drain_reg, drain_next;                 // no new bursts: finish the issued ones
reg         bus_err_reg, bus_err_next;
reg         push_reg, push_next;
reg         bytes_valid_reg, bytes_valid_next;
reg [31:0]  bytes_reg, bytes_next;
reg         err_reg, err_next;
reg [7:0]   err_code_reg, err_code_next;
reg [31:0]  err_pc_reg;

wire drain = drain_reg || stop;

// the request side
accel_burst_walker #(
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(ADDR_WIDTH), .MAX_BURST(MAX_BURST),
    .MAX_OUTSTANDING(MAX_OUTSTANDING), .ROWS_W(YW)
) u_aw (
    .clk(clk), .rst(rst),
    .start(start_run), .start_addr(addr0), .start_rows(c_y),
    .row_bytes(row_bytes), .stride_bytes(stride_bytes),
    .enable(state_reg == S_RUN && !drain), .burst_done(m_axi_bvalid),
    .requested(aw_all), .none_outstanding(ost_none),
    .a_addr(m_axi_awaddr), .a_len(aw_len), .a_valid(aw_valid), .a_ready(m_axi_awready)
);

wire quiet = !aw_valid && lf_cnt_reg == {(LFA+1){1'b0}} && !w_valid_reg && ost_none;

always @* begin
    state_next = state_reg;
    lf_cnt_next = lf_cnt_reg;
    rd_left_next = rd_left_reg;
    rd_sp_next = rd_sp_reg;
    ef_cnt_next = ef_cnt_reg;
    pk_data_next = pk_data_reg;
    pk_strb_next = pk_strb_reg;
    pk_x_next = pk_x_reg;
    pk_boff_next = pk_boff_reg;
    pk_lo_next = pk_lo_reg;
    wb_cnt_next = wb_cnt_reg;
    w_valid_next = w_valid_reg;
    w_data_next = w_data_reg;
    w_strb_next = w_strb_reg;
    w_last_next = w_last_reg;
    drain_next = drain_reg;
    bus_err_next = bus_err_reg;
    push_next = 1'b0;
    bytes_valid_next = 1'b0;
    bytes_next = bytes_reg;
    err_next = 1'b0;
    err_code_next = err_code_reg;

    // accepted bursts whose W beats are still to send
    if (lf_push) lf_cnt_next = lf_cnt_next + {{LFA{1'b0}}, 1'b1};
    if (lf_pop) lf_cnt_next = lf_cnt_next - {{LFA{1'b0}}, 1'b1};

    // write responses
    if (m_axi_bvalid) begin
        if (m_axi_bresp != 2'b00 && state_reg == S_RUN) begin
            bus_err_next = 1'b1;
            drain_next = 1'b1;
        end
    end

    // reader
    if (rd_go) begin
        rd_left_next = rd_left_reg - {{(TW-1){1'b0}}, 1'b1};
        rd_sp_next = rd_sp_reg + {{(ACC_AW-1){1'b0}}, 1'b1};
    end
    if (rd_fly_reg) ef_cnt_next = ef_cnt_next + 3'd1;
    if (pk_fire) ef_cnt_next = ef_cnt_next - 3'd1;

    // packer and W
    if (w_valid_reg && m_axi_wready) w_valid_next = 1'b0;
    if (pk_fire) begin
        pk_x_next = pk_x_reg + {{(XW-1){1'b0}}, 1'b1};
        pk_boff_next = boff_sum[BSH-1:0];
        if (beat_done) begin
            w_valid_next = 1'b1;
            w_data_next = pk_data_reg | placed;
            w_strb_next = pk_strb_reg | placed_strb;
            w_last_next = wb_cnt_reg == lf_head;
            wb_cnt_next = lf_pop ? 8'd0 : wb_cnt_reg + 8'd1;
            pk_data_next = {DATA_WIDTH{1'b0}};
            pk_strb_next = {BEAT{1'b0}};
        end else begin
            pk_data_next = pk_data_reg | placed;
            pk_strb_next = pk_strb_reg | placed_strb;
        end
        if (row_last) begin
            pk_x_next = {XW{1'b0}};
            pk_lo_next = pk_lo_reg + stride_lo;
            pk_boff_next = pk_lo_reg + stride_lo;
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
                end else if (total == {DTW{1'b0}}) begin
                    push_next = c_push;
                    bytes_valid_next = 1'b1;
                    bytes_next = 32'd0;
                    state_next = S_IDLE;
                end else begin
                    state_next = S_RUN;
                    drain_next = 1'b0;
                    bus_err_next = 1'b0;
                    rd_left_next = total[TW-1:0];
                    rd_sp_next = c_sp[ACC_AW-1:0];
                    ef_cnt_next = 3'd0;
                    pk_data_next = {DATA_WIDTH{1'b0}};
                    pk_strb_next = {BEAT{1'b0}};
                    pk_x_next = {XW{1'b0}};
                    pk_boff_next = addr0[BSH-1:0];
                    pk_lo_next = addr0[BSH-1:0];
                    wb_cnt_next = 8'd0;
                end
            end
        end
        S_RUN: begin
            if (stop) drain_next = 1'b1;
            if (quiet && (drain || aw_all)) begin
                state_next = S_IDLE;
                if (bus_err_reg) begin
                    err_next = 1'b1;
                    err_code_next = `ACC_ERR_STORE_BUS;
                end else if (!drain) begin
                    push_next = c_push;
                    bytes_valid_next = 1'b1;
                    bytes_next = moved_bytes;
                end
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
    if (start) err_pc_reg <= pc_reg;
    if (lf_push) begin
        lf_mem[lf_wr_reg] <= aw_len;
        lf_wr_reg <= lf_wr_reg + {{(LFA-1){1'b0}}, 1'b1};
    end
    if (lf_pop) lf_rd_reg <= lf_rd_reg + {{(LFA-1){1'b0}}, 1'b1};
    if (rd_fly_reg) begin
        ef_mem[ef_wr_reg] <= acc_rdata;
        ef_wr_reg <= ef_wr_reg + 2'd1;
    end
    if (pk_fire) ef_rd_reg <= ef_rd_reg + 2'd1;
    rd_fly_reg <= rd_go;
    if (start) begin
        lf_wr_reg <= {LFA{1'b0}};
        lf_rd_reg <= {LFA{1'b0}};
        ef_wr_reg <= 2'd0;
        ef_rd_reg <= 2'd0;
    end

    state_reg <= state_next;
    lf_cnt_reg <= start ? {(LFA+1){1'b0}} : lf_cnt_next;
    rd_left_reg <= rd_left_next;
    rd_sp_reg <= rd_sp_next;
    ef_cnt_reg <= ef_cnt_next;
    pk_data_reg <= pk_data_next;
    pk_strb_reg <= pk_strb_next;
    pk_x_reg <= pk_x_next;
    pk_boff_reg <= pk_boff_next;
    pk_lo_reg <= pk_lo_next;
    wb_cnt_reg <= wb_cnt_next;
    w_valid_reg <= w_valid_next;
    w_data_reg <= w_data_next;
    w_strb_reg <= w_strb_next;
    w_last_reg <= w_last_next;
    drain_reg <= drain_next;
    bus_err_reg <= bus_err_next;
    push_reg <= push_next;
    bytes_valid_reg <= bytes_valid_next;
    bytes_reg <= bytes_next;
    err_reg <= err_next;
    err_code_reg <= err_code_next;

    if (rst) begin
        state_reg <= S_IDLE;
        lf_cnt_reg <= {(LFA+1){1'b0}};
        lf_wr_reg <= {LFA{1'b0}};
        lf_rd_reg <= {LFA{1'b0}};
        rd_left_reg <= {TW{1'b0}};
        rd_fly_reg <= 1'b0;
        ef_cnt_reg <= 3'd0;
        ef_wr_reg <= 2'd0;
        ef_rd_reg <= 2'd0;
        wb_cnt_reg <= 8'd0;
        w_valid_reg <= 1'b0;
        drain_reg <= 1'b0;
        bus_err_reg <= 1'b0;
        push_reg <= 1'b0;
        bytes_valid_reg <= 1'b0;
        bytes_reg <= 32'd0;
        err_reg <= 1'b0;
        err_code_reg <= `ACC_ERR_NONE;
        err_pc_reg <= 32'd0;
    end
end

// --- outputs -------------------------------------------------------------------------------------
assign m_axi_awlen = aw_len;
assign m_axi_awvalid = aw_valid;
assign m_axi_wdata = w_data_reg;
assign m_axi_wstrb = w_strb_reg;
assign m_axi_wlast = w_last_reg;
assign m_axi_wvalid = w_valid_reg;
assign m_axi_bready = 1'b1;

assign acc_re = rd_go;
assign acc_raddr = rd_sp_reg;

assign insn_ready = state_reg == S_IDLE && !stop;
assign tok_pop_prev = start && c_pop;
assign tok_pop_next = 1'b0;
assign tok_push_prev = push_reg;
assign tok_push_next = 1'b0;

assign idle = state_reg == S_IDLE;
assign waiting = state_reg == S_HELD && !tok_ok;
assign busy = state_reg == S_RUN;
assign err = err_reg;
assign err_code = err_code_reg;
assign err_pc = err_pc_reg;
assign bytes_valid = bytes_valid_reg;
assign bytes = bytes_reg;

// The store unit has no "next" queue and no padding (the fetch unit rejects both); a small ACC
// scratchpad uses only the low bits of sp_base; without padding the element count fits TW bits.
wire unused_ok = &{1'b0, tok_next_avail, c_sp, c_pt, c_pl, c_pad, c_rows, c_cols,
                   total[DTW-1:TW]};

endmodule

`resetall
