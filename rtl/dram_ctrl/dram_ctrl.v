`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "dram_defs.vh"

// DDR4-style card memory: an AXI4 slave in front of a request queue, an FR-FCFS scheduler, a
// per-bank DDR4 timing model (bank groups, open-page row buffers, refresh) and the storage.
//
// Every AXI beat becomes one queue entry (one column burst of DATA_WIDTH/8 bytes). Each cycle the
// scheduler may issue one row command (ACT, PRE or REF) and one column command (RD or WR), which
// models a quarter-rate controller placing several commands per controller clock on the DRAM
// command bus. Column commands go to the oldest ready row hit; row commands serve the oldest
// request that needs one, and a row with pending hits is not closed (first-ready, first-come
// first-served). A request that waits STARVE_LIMIT cycles at the head of the queue takes priority.
// AXI ordering: column commands of one ID and direction issue in order, and a request never
// passes an older request to the same line when either one is a write.
//
// Supported: INCR, FIXED and WRAP bursts of any legal length and size, write strobes, read data
// of different IDs interleaved. SLVERR: reserved burst type, a size wider than the bus, or an
// illegal WRAP (length not 2/4/8/16 or unaligned address). DECERR: any byte of the burst beyond
// MEM_SIZE (a write then changes nothing). AxLOCK/AxCACHE/AxPROT/AxQOS are not ports: exclusive
// accesses are not supported.
module dram_ctrl #(
    parameter integer DATA_WIDTH = 512,            // AXI data width; one column burst per beat
    parameter integer ADDR_WIDTH = 32,             // AXI address width
    parameter integer ID_WIDTH = 8,                // AXI ID width
    parameter [63:0] MEM_SIZE = 64'd1073741824,    // storage in bytes, a multiple of a line
    parameter integer QUEUE_DEPTH = 16,            // request queue entries (scheduler look-ahead)
    parameter integer RESP_DEPTH = 16,             // read return FIFO entries (reads in flight)
    parameter integer B_DEPTH = 8,                 // write response FIFO entries
    parameter integer STARVE_LIMIT = 256,          // cycles the oldest request waits before priority
    parameter integer REF_POSTPONE_MAX = `DRAM_REF_POSTPONE_MAX, // refreshes that may be postponed
    parameter integer T_CL = `DRAM_T_CL,           // RD to data, controller cycles
    parameter integer T_CWL = `DRAM_T_CWL,         // WR to write data
    parameter integer T_RCD = `DRAM_T_RCD,         // ACT to RD/WR, same bank
    parameter integer T_RP = `DRAM_T_RP,           // PRE to ACT, same bank
    parameter integer T_RAS = `DRAM_T_RAS,         // ACT to PRE, same bank
    parameter integer T_RC = `DRAM_T_RC,           // ACT to ACT, same bank
    parameter integer T_WR = `DRAM_T_WR,           // end of write data to PRE
    parameter integer T_RTP = `DRAM_T_RTP,         // RD to PRE
    parameter integer T_CCD_S = `DRAM_T_CCD_S,     // column to column, different bank group
    parameter integer T_CCD_L = `DRAM_T_CCD_L,     // column to column, same bank group
    parameter integer T_RRD_S = `DRAM_T_RRD_S,     // ACT to ACT, different bank group
    parameter integer T_RRD_L = `DRAM_T_RRD_L,     // ACT to ACT, same bank group
    parameter integer T_FAW = `DRAM_T_FAW,         // window holding at most four ACTs
    parameter integer T_WTR_S = `DRAM_T_WTR_S,     // end of write data to RD, different bank group
    parameter integer T_WTR_L = `DRAM_T_WTR_L,     // end of write data to RD, same bank group
    parameter integer T_BURST = `DRAM_T_BURST,     // data bus cycles of one burst
    parameter integer T_RTW = `DRAM_T_RTW,         // RD to WR bus turnaround
    parameter integer T_RFC = `DRAM_T_RFC,         // REF to next command
    parameter integer T_REFI = `DRAM_T_REFI        // average refresh interval
) (
    input  wire                      clk,
    input  wire                      rst,

    // AXI4 slave
    input  wire [ID_WIDTH-1:0]       s_axi_awid,
    input  wire [ADDR_WIDTH-1:0]     s_axi_awaddr,
    input  wire [7:0]                s_axi_awlen,
    input  wire [2:0]                s_axi_awsize,
    input  wire [1:0]                s_axi_awburst,
    input  wire                      s_axi_awvalid,
    output wire                      s_axi_awready,
    input  wire [DATA_WIDTH-1:0]     s_axi_wdata,
    input  wire [DATA_WIDTH/8-1:0]   s_axi_wstrb,
    input  wire                      s_axi_wlast,
    input  wire                      s_axi_wvalid,
    output wire                      s_axi_wready,
    output wire [ID_WIDTH-1:0]       s_axi_bid,
    output wire [1:0]                s_axi_bresp,
    output wire                      s_axi_bvalid,
    input  wire                      s_axi_bready,
    input  wire [ID_WIDTH-1:0]       s_axi_arid,
    input  wire [ADDR_WIDTH-1:0]     s_axi_araddr,
    input  wire [7:0]                s_axi_arlen,
    input  wire [2:0]                s_axi_arsize,
    input  wire [1:0]                s_axi_arburst,
    input  wire                      s_axi_arvalid,
    output wire                      s_axi_arready,
    output wire [ID_WIDTH-1:0]       s_axi_rid,
    output wire [DATA_WIDTH-1:0]     s_axi_rdata,
    output wire [1:0]                s_axi_rresp,
    output wire                      s_axi_rlast,
    output wire                      s_axi_rvalid,
    input  wire                      s_axi_rready,

    // Performance counters (free running since reset), ready for the register block
    output wire [63:0]               stat_rd,          // RD column bursts
    output wire [63:0]               stat_wr,          // WR column bursts
    output wire [63:0]               stat_row_hit,     // bursts that found their row open
    output wire [63:0]               stat_row_miss,    // bursts that needed an ACT (bank closed)
    output wire [63:0]               stat_row_conflict,// bursts that needed PRE + ACT
    output wire [63:0]               stat_refresh,     // REF commands
    output wire [63:0]               stat_ref_stall,   // cycles requests waited on refresh
    output wire [63:0]               stat_busy,        // cycles with work in the controller

    // Command trace: what was issued in cycle trace_cycle, presented one cycle later
    output wire [63:0]               trace_cycle,
    output wire                      trace_row_valid,
    output wire [2:0]                trace_row_cmd,    // ACT, PRE or REF
    output wire [`DRAM_BG_BITS-1:0]  trace_row_bg,
    output wire [`DRAM_BA_BITS-1:0]  trace_row_ba,
    output wire [31:0]               trace_row_row,
    output wire                      trace_col_valid,
    output wire [2:0]                trace_col_cmd,    // RD or WR
    output wire [`DRAM_BG_BITS-1:0]  trace_col_bg,
    output wire [`DRAM_BA_BITS-1:0]  trace_col_ba,
    output wire [31:0]               trace_col_col,
    output wire [31:0]               trace_col_row
);

// ---------------------------------------------------------------------------------------------
// Geometry
localparam integer LINE_BYTES = DATA_WIDTH / 8;
localparam [63:0]  LINE_BYTES64 = {32'd0, LINE_BYTES[31:0]};
localparam integer LINE_SHIFT = $clog2(LINE_BYTES);
localparam [63:0]  LINES = MEM_SIZE >> LINE_SHIFT;
localparam integer BG_BITS = `DRAM_BG_BITS;
localparam integer BA_BITS = `DRAM_BA_BITS;
localparam integer COL_BITS = `DRAM_COL_BITS;
localparam integer BANK_BITS = BG_BITS + BA_BITS;
// A line address has at least one row bit above column and bank, so a card smaller than one row
// per bank (e.g. a small card for a demo that must evict) keeps the rank's geometry: its lines
// simply all sit in row 0 (and the top ones are DECERR beyond MEM_SIZE).
localparam integer LINE_BITS_MIN = BANK_BITS + COL_BITS + 1;
localparam integer LINE_BITS = $clog2(LINES) > LINE_BITS_MIN ? $clog2(LINES) : LINE_BITS_MIN;
localparam integer NB = 1 << BANK_BITS;
localparam integer NG = 1 << BG_BITS;
localparam integer ROW_BITS = LINE_BITS - BANK_BITS - COL_BITS;
localparam integer Q = QUEUE_DEPTH;
localparam integer QB = $clog2(Q);
localparam integer TW = 16;                       // timing counter width
localparam integer RB = $clog2(RESP_DEPTH + 1);  // read credit counter width
localparam integer RPW = $clog2(RESP_DEPTH);      // R FIFO pointer width
localparam integer BB = $clog2(B_DEPTH + 1);
localparam integer BPW = $clog2(B_DEPTH);
localparam integer WRITE_TO_PRE = T_CWL + T_BURST + T_WR;
localparam integer WRITE_TO_RD_S = T_CWL + T_BURST + T_WTR_S;
localparam integer WRITE_TO_RD_L = T_CWL + T_BURST + T_WTR_L;
localparam integer COL_TO_COL_S = (T_CCD_S > T_BURST) ? T_CCD_S : T_BURST;
localparam integer COL_TO_COL_L = (T_CCD_L > T_BURST) ? T_CCD_L : T_BURST;

localparam [1:0] RESP_OKAY = 2'b00;
localparam [1:0] RESP_SLVERR = 2'b10;
localparam [1:0] RESP_DECERR = 2'b11;
localparam [1:0] BURST_FIXED = 2'b00;
localparam [1:0] BURST_WRAP = 2'b10;

localparam [1:0] CLASS_HIT = 2'd0;
localparam [1:0] CLASS_MISS = 2'd1;
localparam [1:0] CLASS_CONFLICT = 2'd2;

// Illegal parameter values stop the simulation at time zero.
initial begin
    if (DATA_WIDTH < 32 || DATA_WIDTH > 1024 || (DATA_WIDTH & (DATA_WIDTH - 1)) != 0)
        $fatal(1, "dram_ctrl: DATA_WIDTH must be a power of two in 32..1024, got %0d", DATA_WIDTH);
    if (MEM_SIZE == 64'd0 || MEM_SIZE % LINE_BYTES64 != 64'd0)
        $fatal(1, "dram_ctrl: MEM_SIZE must be a positive multiple of %0d bytes, got %0d",
               LINE_BYTES, MEM_SIZE);
    if (ROW_BITS > 32)
        $fatal(1, "dram_ctrl: MEM_SIZE %0d gives %0d row bits, more than 32", MEM_SIZE, ROW_BITS);
    if (LINE_BITS + LINE_SHIFT > ADDR_WIDTH)
        $fatal(1, "dram_ctrl: MEM_SIZE %0d does not fit in ADDR_WIDTH %0d", MEM_SIZE, ADDR_WIDTH);
    if (Q < 2 || (Q & (Q - 1)) != 0)
        $fatal(1, "dram_ctrl: QUEUE_DEPTH must be a power of two >= 2, got %0d", Q);
    if (RESP_DEPTH < 2 || (RESP_DEPTH & (RESP_DEPTH - 1)) != 0 || B_DEPTH < 2
        || (B_DEPTH & (B_DEPTH - 1)) != 0)
        $fatal(1, "dram_ctrl: RESP_DEPTH and B_DEPTH must be powers of two >= 2");
    if (T_CL < 2 || T_CWL < 1 || T_RCD < 1 || T_RP < 1 || T_RAS < 1 || T_RC < 1 || T_CCD_S < 1
        || T_CCD_L < 1 || T_BURST < 1 || T_RFC < 1 || T_REFI < 1 || T_RRD_S < 0 || T_RRD_L < 0
        || T_FAW < 0 || T_WR < 0 || T_RTP < 0 || T_WTR_S < 0 || T_WTR_L < 0 || T_RTW < 0)
        $fatal(1, "dram_ctrl: tCL must be >= 2, other timings >= 1 (tWR, tRTP, tRRD, tFAW, tWTR, tRTW >= 0)");
    if (WRITE_TO_PRE >= (1 << TW) || T_RFC >= (1 << TW) || T_RC >= (1 << TW) || T_FAW >= (1 << TW)
        || T_REFI >= (1 << TW) || WRITE_TO_RD_L >= (1 << TW))
        $fatal(1, "dram_ctrl: timing parameters must be below %0d cycles", 1 << TW);
    if (REF_POSTPONE_MAX < 0 || REF_POSTPONE_MAX > 8)
        $fatal(1, "dram_ctrl: REF_POSTPONE_MAX must be 0..8 (DDR4), got %0d", REF_POSTPONE_MAX);
end

function [TW-1:0] dec;                            // saturating decrement of a timing counter
    input [TW-1:0] x;
    dec = (x == {TW{1'b0}}) ? x : x - 1'b1;
endfunction

function [TW-1:0] hold;                           // decremented counter held to at least t-1
    input [TW-1:0] x;
    input integer t;
    reg [TW-1:0] d, lim;
    begin
        d = dec(x);
        lim = (t > 0) ? t[TW-1:0] - 1'b1 : {TW{1'b0}};
        hold = (d > lim) ? d : lim;
    end
endfunction

function [BANK_BITS-1:0] line_bank;               // {bank group, bank}
    input [LINE_BITS-1:0] line;
    line_bank = {line[BG_BITS-1:0], line[BG_BITS+COL_BITS +: BA_BITS]};
endfunction

function [ROW_BITS-1:0] line_row;
    input [LINE_BITS-1:0] line;
    line_row = line[LINE_BITS-1 -: ROW_BITS];
endfunction

// ---------------------------------------------------------------------------------------------
// Storage
// one entry per line address (2**LINE_BITS >= LINES; lines at or beyond MEM_SIZE are never
// accessed: their requests get DECERR)
reg [DATA_WIDTH-1:0] mem [0:(1 << LINE_BITS)-1];

reg [LINE_BITS:0] init_i;
initial begin
    for (init_i = 0; init_i < LINES[LINE_BITS:0]; init_i = init_i + 1'b1)
        mem[init_i[LINE_BITS-1:0]] = {DATA_WIDTH{1'b0}};
end

// ---------------------------------------------------------------------------------------------
// AXI burst front ends: accept a burst, then present one beat (one queue entry) per cycle.

// Response for a burst (OKAY, SLVERR or DECERR) and the wrap mask.
function [1:0] burst_resp;
    input [ADDR_WIDTH-1:0] addr;
    input [7:0] len;
    input [2:0] size;
    input [1:0] burst;
    reg [ADDR_WIDTH:0] total, last_byte, aligned;
    reg legal_wrap;
    begin
        total = {{ADDR_WIDTH-8{1'b0}}, ({1'b0, len} + 9'd1)} << size;
        aligned = {1'b0, addr} & ~(({{ADDR_WIDTH{1'b0}}, 1'b1} << size) - 1'b1);
        legal_wrap = (len == 8'd1 || len == 8'd3 || len == 8'd7 || len == 8'd15)
                     && (aligned == {1'b0, addr});
        case (burst)
            BURST_FIXED: last_byte = aligned + ({{ADDR_WIDTH{1'b0}}, 1'b1} << size) - 1'b1;
            BURST_WRAP:  last_byte = ({1'b0, addr} & ~(total - 1'b1)) + total - 1'b1;
            default:     last_byte = aligned + total - 1'b1;
        endcase
        if ({29'd0, size} > LINE_SHIFT || burst == 2'b11 || (burst == BURST_WRAP && !legal_wrap))
            burst_resp = RESP_SLVERR;
        else if ({{64-ADDR_WIDTH-1{1'b0}}, last_byte} >= MEM_SIZE)
            burst_resp = RESP_DECERR;
        else
            burst_resp = RESP_OKAY;
    end
endfunction

function [ADDR_WIDTH-1:0] next_addr;
    input [ADDR_WIDTH-1:0] addr;
    input [2:0] size;
    input [1:0] burst;
    input [ADDR_WIDTH-1:0] wrap_mask;
    reg [ADDR_WIDTH-1:0] step, aligned;
    begin
        step = {{ADDR_WIDTH-1{1'b0}}, 1'b1} << size;
        aligned = addr & ~(step - 1'b1);
        case (burst)
            BURST_FIXED: next_addr = addr;
            BURST_WRAP:  next_addr = (addr & ~wrap_mask) | ((aligned + step) & wrap_mask);
            default:     next_addr = aligned + step;  // INCR
        endcase
    end
endfunction

function [ADDR_WIDTH-1:0] wrap_mask_of;
    input [7:0] len;
    input [2:0] size;
    wrap_mask_of = ({{ADDR_WIDTH-9{1'b0}}, ({1'b0, len} + 9'd1)} << size) - 1'b1;
endfunction

reg                   rd_active_reg;
reg [ADDR_WIDTH-1:0]  rd_addr_reg;
reg [ADDR_WIDTH-1:0]  rd_wmask_reg;
reg [7:0]             rd_cnt_reg;
reg [2:0]             rd_size_reg;
reg [1:0]             rd_burst_reg;
reg [ID_WIDTH-1:0]    rd_id_reg;
reg [1:0]             rd_resp_reg;

reg                   wr_active_reg;
reg [ADDR_WIDTH-1:0]  wr_addr_reg;
reg [ADDR_WIDTH-1:0]  wr_wmask_reg;
reg [7:0]             wr_cnt_reg;
reg [2:0]             wr_size_reg;
reg [1:0]             wr_burst_reg;
reg [ID_WIDTH-1:0]    wr_id_reg;
reg [1:0]             wr_resp_reg;

// ---------------------------------------------------------------------------------------------
// Request queue
reg [Q-1:0]            q_valid;
reg [Q-1:0]            q_write;
reg [Q-1:0]            q_last;        // last beat of its burst (carries the B response)
reg [1:0]              q_resp [0:Q-1];// non-OKAY: an error entry, no DRAM access
reg [ID_WIDTH-1:0]     q_id [0:Q-1];
reg [LINE_BITS-1:0]    q_line [0:Q-1];
reg [DATA_WIDTH-1:0]   q_data [0:Q-1];
reg [LINE_BYTES-1:0]   q_strb [0:Q-1];
reg [1:0]              q_class [0:Q-1];
reg [Q-1:0]            q_older [0:Q-1]; // q_older[i][j]: entry j is older than entry i
reg [Q-1:0]            q_dep [0:Q-1];   // q_dep[i][j]: entry i may not issue before entry j

// Bank state and timing counters (a command is allowed when its counter is zero)
reg [NB-1:0]           bank_open;
reg [ROW_BITS-1:0]     bank_row [0:NB-1];
reg [TW-1:0]           t_act [0:NB-1];    // tRP, tRC, tRFC
reg [TW-1:0]           t_pre [0:NB-1];    // tRAS, tRTP, write recovery
reg [TW-1:0]           t_rcd [0:NB-1];    // tRCD
reg [TW-1:0]           t_rrd_l [0:NG-1];
reg [TW-1:0]           t_ccd_l [0:NG-1];
reg [TW-1:0]           t_wtr_l [0:NG-1];
reg [TW-1:0]           t_rrd_s, t_ccd_s, t_wtr_s, t_rtw;
reg [TW-1:0]           t_faw [0:3];
reg [TW-1:0]           t_rfc_busy;

// Refresh
reg [TW-1:0]           ref_timer;
reg [3:0]              ref_pending;
reg                    ref_mode;

// Read return path: T_CL delay line, then the R FIFO
reg [T_CL-1:0]         pipe_valid;
reg [DATA_WIDTH-1:0]   pipe_data [0:T_CL-1];
reg [ID_WIDTH-1:0]     pipe_id [0:T_CL-1];
reg [1:0]              pipe_resp [0:T_CL-1];
reg [T_CL-1:0]         pipe_last;
reg [DATA_WIDTH-1:0]   rf_data [0:RESP_DEPTH-1];
reg [ID_WIDTH-1:0]     rf_id [0:RESP_DEPTH-1];
reg [1:0]              rf_resp [0:RESP_DEPTH-1];
reg [RESP_DEPTH-1:0]   rf_last;
reg [RB-1:0]           rf_count;
reg [RPW-1:0]          rf_wp, rf_rp;
reg [RB-1:0]           rd_outstanding;
reg [ID_WIDTH-1:0]     bf_id [0:B_DEPTH-1];
reg [1:0]              bf_resp [0:B_DEPTH-1];
reg [BB-1:0]           bf_count;
reg [BPW-1:0]          bf_wp, bf_rp;

reg [TW-1:0]           head_wait;
reg                    alloc_prio_wr;
reg [63:0]             cycle;
reg [63:0]             cnt_rd, cnt_wr, cnt_hit, cnt_miss, cnt_conflict, cnt_ref, cnt_ref_stall,
                       cnt_busy;

// Trace registers
reg [63:0]             tr_cycle;
reg                    tr_row_valid, tr_col_valid;
reg [2:0]              tr_row_cmd, tr_col_cmd;
reg [BANK_BITS-1:0]    tr_row_bank, tr_col_bank;
reg [ROW_BITS-1:0]     tr_row_row, tr_col_row;
reg [COL_BITS-1:0]     tr_col_col;

// ---------------------------------------------------------------------------------------------
// Scheduler (combinational)
reg [Q-1:0]            e_hit, e_need_act, e_need_pre, e_blocked, e_head;
reg [NB-1:0]           bank_ready_hit;
reg [Q-1:0]            row_cand, col_cand, row_pick, col_pick;
reg                    row_issue, col_issue, ref_issue;
reg [2:0]              row_cmd;
reg [BANK_BITS-1:0]    row_bank;
reg [ROW_BITS-1:0]     row_row;
reg [QB-1:0]           row_idx, col_idx;
reg                    faw_ok, all_closed, head_issue, starve;
reg                    rd_credit, b_credit;
reg [BANK_BITS-1:0]    eb;
reg [BG_BITS-1:0]      eg;
integer ci;

always @* begin
    starve = head_wait >= STARVE_LIMIT[TW-1:0];
    rd_credit = rd_outstanding < RESP_DEPTH[RB-1:0];
    b_credit = bf_count < B_DEPTH[BB-1:0];
    faw_ok = (t_faw[0] == 0) || (t_faw[1] == 0) || (t_faw[2] == 0) || (t_faw[3] == 0);

    bank_ready_hit = {NB{1'b0}};
    for (ci = 0; ci < Q; ci = ci + 1) begin
        eb = line_bank(q_line[ci]);
        e_hit[ci] = bank_open[eb] && bank_row[eb] == line_row(q_line[ci]);
        e_need_act[ci] = !bank_open[eb];
        e_need_pre[ci] = bank_open[eb] && !e_hit[ci];
        e_blocked[ci] = |(q_dep[ci] & q_valid);
        e_head[ci] = q_valid[ci] && !(|(q_valid & q_older[ci]));
        if (q_valid[ci] && q_resp[ci] == RESP_OKAY && e_hit[ci] && !e_blocked[ci])
            bank_ready_hit[eb] = 1'b1;
    end

    // Row command candidates
    for (ci = 0; ci < Q; ci = ci + 1) begin
        eb = line_bank(q_line[ci]);
        eg = eb[BANK_BITS-1 -: BG_BITS];
        row_cand[ci] = q_valid[ci] && q_resp[ci] == RESP_OKAY && !ref_mode && (!starve || e_head[ci])
            && ((e_need_act[ci] && t_act[eb] == 0 && t_rrd_l[eg] == 0 && t_rrd_s == 0 && faw_ok)
                || (e_need_pre[ci] && t_pre[eb] == 0 && (!bank_ready_hit[eb] || (starve && e_head[ci]))));
    end

    // Column command candidates
    for (ci = 0; ci < Q; ci = ci + 1) begin
        eb = line_bank(q_line[ci]);
        eg = eb[BANK_BITS-1 -: BG_BITS];
        if (!q_valid[ci] || e_blocked[ci] || (starve && !e_head[ci]))
            col_cand[ci] = 1'b0;
        else if (q_resp[ci] != RESP_OKAY)
            col_cand[ci] = q_write[ci] ? b_credit : rd_credit;
        else
            col_cand[ci] = !ref_mode && e_hit[ci] && t_rcd[eb] == 0 && t_ccd_l[eg] == 0 && t_ccd_s == 0
                && (q_write[ci] ? (t_rtw == 0 && (!q_last[ci] || b_credit))
                               : (t_wtr_l[eg] == 0 && t_wtr_s == 0 && rd_credit));
    end

    // Oldest candidate of each kind
    for (ci = 0; ci < Q; ci = ci + 1) begin
        row_pick[ci] = row_cand[ci] && !(|(row_cand & q_older[ci]));
        col_pick[ci] = col_cand[ci] && !(|(col_cand & q_older[ci]));
    end
    row_idx = {QB{1'b0}};
    col_idx = {QB{1'b0}};
    for (ci = 0; ci < Q; ci = ci + 1) begin
        if (row_pick[ci]) row_idx = ci[QB-1:0];
        if (col_pick[ci]) col_idx = ci[QB-1:0];
    end
    col_issue = |col_pick;
    head_issue = col_issue && e_head[col_idx];

    // Refresh takes the row command slot: close every bank, then REF.
    all_closed = !(|bank_open);
    for (ci = 0; ci < NB; ci = ci + 1)
        if (t_act[ci] != 0) all_closed = 1'b0;
    row_issue = 1'b0;
    ref_issue = 1'b0;
    row_cmd = `DRAM_CMD_NOP;
    row_bank = {BANK_BITS{1'b0}};
    row_row = {ROW_BITS{1'b0}};
    if (ref_mode) begin
        if (all_closed) begin
            row_issue = 1'b1;
            ref_issue = 1'b1;
            row_cmd = `DRAM_CMD_REF;
        end else begin
            for (ci = NB - 1; ci >= 0; ci = ci - 1) begin
                if (bank_open[ci] && t_pre[ci] == 0) begin
                    row_issue = 1'b1;
                    row_cmd = `DRAM_CMD_PRE;
                    row_bank = ci[BANK_BITS-1:0];
                end
            end
        end
    end else if (|row_pick) begin
        row_issue = 1'b1;
        row_bank = line_bank(q_line[row_idx]);
        row_row = line_row(q_line[row_idx]);
        row_cmd = e_need_act[row_idx] ? `DRAM_CMD_ACT : `DRAM_CMD_PRE;
    end
end

// ---------------------------------------------------------------------------------------------
// Allocation of new queue entries from the AXI front ends (one per cycle)
reg [QB-1:0]           free_idx;
reg                    have_free;
reg                    rd_req, wr_req, rd_grant, wr_grant, alloc;
reg                    ar_take, aw_take;
reg                    alloc_write;
reg [1:0]              alloc_resp;
reg [ID_WIDTH-1:0]     alloc_id;
reg [LINE_BITS-1:0]    alloc_line;
reg                    alloc_last;
reg [Q-1:0]            alloc_dep, alloc_older;
integer ai, aj;

wire [LINE_BITS-1:0] rd_line_addr = rd_addr_reg[LINE_SHIFT +: LINE_BITS];
wire [LINE_BITS-1:0] wr_line_addr = wr_addr_reg[LINE_SHIFT +: LINE_BITS];

always @* begin
    have_free = 1'b0;
    free_idx = {QB{1'b0}};
    for (ai = Q - 1; ai >= 0; ai = ai - 1) begin
        if (!q_valid[ai]) begin
            have_free = 1'b1;
            free_idx = ai[QB-1:0];
        end
    end
    rd_req = rd_active_reg;
    // An error write burst needs a queue entry only for its last beat (the B response).
    wr_req = wr_active_reg && s_axi_wvalid && (wr_resp_reg == RESP_OKAY || wr_cnt_reg == 0);
    rd_grant = have_free && rd_req && (!wr_req || !alloc_prio_wr);
    wr_grant = have_free && wr_req && (!rd_req || alloc_prio_wr);
    alloc = rd_grant || wr_grant;
    ar_take = s_axi_arvalid && (!rd_active_reg || (rd_grant && rd_cnt_reg == 0));
    aw_take = s_axi_awvalid && (!wr_active_reg || (wr_grant && wr_cnt_reg == 0));

    alloc_write = wr_grant;
    alloc_resp = wr_grant ? wr_resp_reg : rd_resp_reg;
    alloc_id = wr_grant ? wr_id_reg : rd_id_reg;
    alloc_line = wr_grant ? wr_line_addr : rd_line_addr;
    alloc_last = wr_grant ? (wr_cnt_reg == 0) : (rd_cnt_reg == 0);
    for (aj = 0; aj < Q; aj = aj + 1) begin
        alloc_older[aj] = q_valid[aj] && !(col_issue && col_idx == aj[QB-1:0]);
        alloc_dep[aj] = alloc_older[aj]
            && ((q_id[aj] == alloc_id && q_write[aj] == alloc_write)
                || (alloc_resp == RESP_OKAY && q_resp[aj] == RESP_OKAY && q_line[aj] == alloc_line
                    && (alloc_write || q_write[aj])));
    end
end

assign s_axi_arready = !rd_active_reg || (rd_grant && rd_cnt_reg == 0);
assign s_axi_awready = !wr_active_reg || (wr_grant && wr_cnt_reg == 0);
assign s_axi_wready = wr_active_reg
    && (wr_grant || (wr_resp_reg != RESP_OKAY && wr_cnt_reg != 0));

// ---------------------------------------------------------------------------------------------
// R and B outputs
assign s_axi_rvalid = rf_count != 0;
assign s_axi_rdata = rf_data[rf_rp];
assign s_axi_rid = rf_id[rf_rp];
assign s_axi_rresp = rf_resp[rf_rp];
assign s_axi_rlast = rf_last[rf_rp];
assign s_axi_bvalid = bf_count != 0;
assign s_axi_bid = bf_id[bf_rp];
assign s_axi_bresp = bf_resp[bf_rp];

wire r_pop = s_axi_rvalid && s_axi_rready;
wire b_pop = s_axi_bvalid && s_axi_bready;
wire col_is_write = q_write[col_idx];
wire col_is_err = q_resp[col_idx] != RESP_OKAY;
wire rd_push = col_issue && !col_is_write;
wire b_push = col_issue && col_is_write && q_last[col_idx];
wire [BANK_BITS-1:0] col_bank = line_bank(q_line[col_idx]);
wire [BG_BITS-1:0] col_bg = col_bank[BANK_BITS-1 -: BG_BITS];
wire [BG_BITS-1:0] row_bg = row_bank[BANK_BITS-1 -: BG_BITS];
wire queue_busy = |q_valid;
// The burst length comes from AW; WLAST carries nothing the controller needs.
wire unused_ok = &{1'b0, s_axi_wlast};
integer si, sk;

// ---------------------------------------------------------------------------------------------
// State update
always @(posedge clk) begin
    cycle <= cycle + 1'b1;

    // --- front ends
    if (ar_take) begin
        rd_active_reg <= 1'b1;
        rd_addr_reg <= s_axi_araddr;
        rd_wmask_reg <= wrap_mask_of(s_axi_arlen, s_axi_arsize);
        rd_cnt_reg <= s_axi_arlen;
        rd_size_reg <= s_axi_arsize;
        rd_burst_reg <= s_axi_arburst;
        rd_id_reg <= s_axi_arid;
        rd_resp_reg <= burst_resp(s_axi_araddr, s_axi_arlen, s_axi_arsize, s_axi_arburst);
    end else if (rd_grant) begin
        rd_addr_reg <= next_addr(rd_addr_reg, rd_size_reg, rd_burst_reg, rd_wmask_reg);
        rd_cnt_reg <= rd_cnt_reg - 1'b1;
        if (rd_cnt_reg == 0) rd_active_reg <= 1'b0;
    end
    if (aw_take) begin
        wr_active_reg <= 1'b1;
        wr_addr_reg <= s_axi_awaddr;
        wr_wmask_reg <= wrap_mask_of(s_axi_awlen, s_axi_awsize);
        wr_cnt_reg <= s_axi_awlen;
        wr_size_reg <= s_axi_awsize;
        wr_burst_reg <= s_axi_awburst;
        wr_id_reg <= s_axi_awid;
        wr_resp_reg <= burst_resp(s_axi_awaddr, s_axi_awlen, s_axi_awsize, s_axi_awburst);
    end else if (s_axi_wready && s_axi_wvalid) begin
        wr_addr_reg <= next_addr(wr_addr_reg, wr_size_reg, wr_burst_reg, wr_wmask_reg);
        wr_cnt_reg <= wr_cnt_reg - 1'b1;
        if (wr_cnt_reg == 0) wr_active_reg <= 1'b0;
    end
    if (rd_req && wr_req && have_free)
        alloc_prio_wr <= !alloc_prio_wr;

    // --- queue
    if (alloc) begin
        q_valid[free_idx] <= 1'b1;
        q_write[free_idx] <= alloc_write;
        q_last[free_idx] <= alloc_last;
        q_resp[free_idx] <= alloc_resp;
        q_id[free_idx] <= alloc_id;
        q_line[free_idx] <= alloc_resp == RESP_OKAY ? alloc_line : {LINE_BITS{1'b0}};
        q_data[free_idx] <= s_axi_wdata;
        q_strb[free_idx] <= s_axi_wstrb;
        q_class[free_idx] <= CLASS_HIT;
        q_older[free_idx] <= alloc_older;
        q_dep[free_idx] <= alloc_dep;
        for (si = 0; si < Q; si = si + 1) begin
            if (si[QB-1:0] != free_idx) begin
                q_older[si][free_idx] <= 1'b0;
                q_dep[si][free_idx] <= 1'b0;
            end
        end
    end
    if (col_issue)
        q_valid[col_idx] <= 1'b0;

    // --- timing counters
    for (si = 0; si < NB; si = si + 1) begin
        t_act[si] <= dec(t_act[si]);
        t_pre[si] <= dec(t_pre[si]);
        t_rcd[si] <= dec(t_rcd[si]);
    end
    for (si = 0; si < NG; si = si + 1) begin
        t_rrd_l[si] <= dec(t_rrd_l[si]);
        t_ccd_l[si] <= dec(t_ccd_l[si]);
        t_wtr_l[si] <= dec(t_wtr_l[si]);
    end
    for (si = 0; si < 4; si = si + 1)
        t_faw[si] <= dec(t_faw[si]);
    t_rrd_s <= dec(t_rrd_s);
    t_ccd_s <= dec(t_ccd_s);
    t_wtr_s <= dec(t_wtr_s);
    t_rtw <= dec(t_rtw);
    t_rfc_busy <= dec(t_rfc_busy);

    // --- row command
    if (row_issue) begin
        case (row_cmd)
            `DRAM_CMD_ACT: begin
                bank_open[row_bank] <= 1'b1;
                bank_row[row_bank] <= row_row;
                t_act[row_bank] <= hold(t_act[row_bank], T_RC);
                t_pre[row_bank] <= hold(t_pre[row_bank], T_RAS);
                t_rcd[row_bank] <= hold(t_rcd[row_bank], T_RCD);
                t_rrd_l[row_bg] <= hold(t_rrd_l[row_bg], T_RRD_L);
                t_rrd_s <= hold(t_rrd_s, T_RRD_S);
                if (t_faw[0] == 0) t_faw[0] <= hold(t_faw[0], T_FAW);
                else if (t_faw[1] == 0) t_faw[1] <= hold(t_faw[1], T_FAW);
                else if (t_faw[2] == 0) t_faw[2] <= hold(t_faw[2], T_FAW);
                else t_faw[3] <= hold(t_faw[3], T_FAW);
                if (q_class[row_idx] == CLASS_HIT) q_class[row_idx] <= CLASS_MISS;
            end
            `DRAM_CMD_PRE: begin
                bank_open[row_bank] <= 1'b0;
                t_act[row_bank] <= hold(t_act[row_bank], T_RP);
                if (!ref_mode && q_class[row_idx] == CLASS_HIT) q_class[row_idx] <= CLASS_CONFLICT;
            end
            default: begin // REF
                for (si = 0; si < NB; si = si + 1)
                    t_act[si] <= hold(t_act[si], T_RFC);
                t_rfc_busy <= hold(t_rfc_busy, T_RFC);
            end
        endcase
    end

    // --- column command
    if (col_issue && !col_is_err) begin
        t_ccd_l[col_bg] <= hold(t_ccd_l[col_bg], COL_TO_COL_L);
        t_ccd_s <= hold(t_ccd_s, COL_TO_COL_S);
        if (col_is_write) begin
            for (sk = 0; sk < LINE_BYTES; sk = sk + 1)
                if (q_strb[col_idx][sk])
                    mem[q_line[col_idx]][sk*8 +: 8] <= q_data[col_idx][sk*8 +: 8];
            t_pre[col_bank] <= hold(t_pre[col_bank], WRITE_TO_PRE);
            t_wtr_l[col_bg] <= hold(t_wtr_l[col_bg], WRITE_TO_RD_L);
            t_wtr_s <= hold(t_wtr_s, WRITE_TO_RD_S);
        end else begin
            t_pre[col_bank] <= hold(t_pre[col_bank], T_RTP);
            t_rtw <= hold(t_rtw, T_RTW);
        end
    end

    // --- read return: T_CL delay line into the R FIFO
    pipe_valid <= {pipe_valid[T_CL-2:0], rd_push};
    for (si = T_CL - 1; si > 0; si = si - 1) begin
        pipe_data[si] <= pipe_data[si-1];
        pipe_id[si] <= pipe_id[si-1];
        pipe_resp[si] <= pipe_resp[si-1];
    end
    pipe_last <= {pipe_last[T_CL-2:0], q_last[col_idx]};
    pipe_data[0] <= col_is_err ? {DATA_WIDTH{1'b0}} : mem[q_line[col_idx]];
    pipe_id[0] <= q_id[col_idx];
    pipe_resp[0] <= q_resp[col_idx];
    if (pipe_valid[T_CL-1]) begin
        rf_data[rf_wp] <= pipe_data[T_CL-1];
        rf_id[rf_wp] <= pipe_id[T_CL-1];
        rf_resp[rf_wp] <= pipe_resp[T_CL-1];
        rf_last[rf_wp] <= pipe_last[T_CL-1];
        rf_wp <= rf_wp + 1'b1;
    end
    if (r_pop)
        rf_rp <= rf_rp + 1'b1;
    rf_count <= rf_count + {{RB-1{1'b0}}, pipe_valid[T_CL-1]} - {{RB-1{1'b0}}, r_pop};
    rd_outstanding <= rd_outstanding + {{RB-1{1'b0}}, rd_push} - {{RB-1{1'b0}}, r_pop};

    // --- write responses
    if (b_push) begin
        bf_id[bf_wp] <= q_id[col_idx];
        bf_resp[bf_wp] <= q_resp[col_idx];
        bf_wp <= bf_wp + 1'b1;
    end
    if (b_pop)
        bf_rp <= bf_rp + 1'b1;
    bf_count <= bf_count + {{BB-1{1'b0}}, b_push} - {{BB-1{1'b0}}, b_pop};

    // --- refresh: owe one REF every T_REFI; refresh when idle, or when postponing no further
    ref_timer <= (ref_timer == T_REFI[TW-1:0] - 1'b1) ? {TW{1'b0}} : ref_timer + 1'b1;
    ref_pending <= ref_pending + {3'd0, ref_timer == T_REFI[TW-1:0] - 1'b1}
                   - {3'd0, ref_issue};
    if (ref_issue)
        ref_mode <= 1'b0;
    else if (ref_pending > REF_POSTPONE_MAX[3:0]
             || (ref_pending != 0 && !queue_busy && !rd_active_reg && !wr_active_reg))
        ref_mode <= 1'b1;

    // --- starvation guard: cycles the oldest entry has waited
    if (!queue_busy || head_issue)
        head_wait <= {TW{1'b0}};
    else if (head_wait != {TW{1'b1}})
        head_wait <= head_wait + 1'b1;

    // --- statistics
    if (col_issue && !col_is_err) begin
        if (col_is_write) cnt_wr <= cnt_wr + 1'b1;
        else cnt_rd <= cnt_rd + 1'b1;
        case (q_class[col_idx])
            CLASS_MISS: cnt_miss <= cnt_miss + 1'b1;
            CLASS_CONFLICT: cnt_conflict <= cnt_conflict + 1'b1;
            default: cnt_hit <= cnt_hit + 1'b1;
        endcase
    end
    if (ref_issue) cnt_ref <= cnt_ref + 1'b1;
    if (queue_busy && (ref_mode || t_rfc_busy != 0)) cnt_ref_stall <= cnt_ref_stall + 1'b1;
    if (queue_busy || rd_outstanding != 0 || bf_count != 0 || rd_active_reg || wr_active_reg)
        cnt_busy <= cnt_busy + 1'b1;

    // --- command trace
    tr_cycle <= cycle;
    tr_row_valid <= row_issue;
    tr_row_cmd <= row_cmd;
    tr_row_bank <= row_bank;
    tr_row_row <= row_row;
    tr_col_valid <= col_issue && !col_is_err;
    tr_col_cmd <= col_is_write ? `DRAM_CMD_WR : `DRAM_CMD_RD;
    tr_col_bank <= col_bank;
    tr_col_row <= line_row(q_line[col_idx]);
    tr_col_col <= q_line[col_idx][BG_BITS +: COL_BITS];

    if (rst) begin
        cycle <= 64'd0;
        rd_active_reg <= 1'b0;
        wr_active_reg <= 1'b0;
        alloc_prio_wr <= 1'b0;
        q_valid <= {Q{1'b0}};
        bank_open <= {NB{1'b0}};
        for (si = 0; si < NB; si = si + 1) begin
            t_act[si] <= {TW{1'b0}};
            t_pre[si] <= {TW{1'b0}};
            t_rcd[si] <= {TW{1'b0}};
        end
        for (si = 0; si < NG; si = si + 1) begin
            t_rrd_l[si] <= {TW{1'b0}};
            t_ccd_l[si] <= {TW{1'b0}};
            t_wtr_l[si] <= {TW{1'b0}};
        end
        for (si = 0; si < 4; si = si + 1)
            t_faw[si] <= {TW{1'b0}};
        t_rrd_s <= {TW{1'b0}};
        t_ccd_s <= {TW{1'b0}};
        t_wtr_s <= {TW{1'b0}};
        t_rtw <= {TW{1'b0}};
        t_rfc_busy <= {TW{1'b0}};
        ref_timer <= {TW{1'b0}};
        ref_pending <= 4'd0;
        ref_mode <= 1'b0;
        pipe_valid <= {T_CL{1'b0}};
        rf_count <= {RB{1'b0}};
        rf_wp <= {RPW{1'b0}};
        rf_rp <= {RPW{1'b0}};
        rd_outstanding <= {RB{1'b0}};
        bf_count <= {BB{1'b0}};
        bf_wp <= {BPW{1'b0}};
        bf_rp <= {BPW{1'b0}};
        head_wait <= {TW{1'b0}};
        cnt_rd <= 64'd0;
        cnt_wr <= 64'd0;
        cnt_hit <= 64'd0;
        cnt_miss <= 64'd0;
        cnt_conflict <= 64'd0;
        cnt_ref <= 64'd0;
        cnt_ref_stall <= 64'd0;
        cnt_busy <= 64'd0;
        tr_row_valid <= 1'b0;
        tr_col_valid <= 1'b0;
    end
end

assign stat_rd = cnt_rd;
assign stat_wr = cnt_wr;
assign stat_row_hit = cnt_hit;
assign stat_row_miss = cnt_miss;
assign stat_row_conflict = cnt_conflict;
assign stat_refresh = cnt_ref;
assign stat_ref_stall = cnt_ref_stall;
assign stat_busy = cnt_busy;

assign trace_cycle = tr_cycle;
assign trace_row_valid = tr_row_valid;
assign trace_row_cmd = tr_row_cmd;
assign trace_row_bg = tr_row_bank[BANK_BITS-1 -: BG_BITS];
assign trace_row_ba = tr_row_bank[BA_BITS-1:0];
assign trace_row_row = {{32-ROW_BITS{1'b0}}, tr_row_row};
assign trace_col_valid = tr_col_valid;
assign trace_col_cmd = tr_col_cmd;
assign trace_col_bg = tr_col_bank[BANK_BITS-1 -: BG_BITS];
assign trace_col_ba = tr_col_bank[BA_BITS-1:0];
assign trace_col_col = {{32-COL_BITS{1'b0}}, tr_col_col};
assign trace_col_row = {{32-ROW_BITS{1'b0}}, tr_col_row};

endmodule

`resetall
