`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "card_regs.vh"

// XDMA-like scatter-gather DMA engine (docs/dma.md is its contract).
//
// Three channels (H2C, C2H, C2C) share one data mover and are served a chain at a time, round
// robin. Inside a chain the work is pipelined in three stages:
//   fetch: descriptors are read from host memory ahead of use into a small FIFO and checked
//          (magic, length, bus error);
//   read:  each descriptor becomes a job; its source range is read in requests split at the
//          4 KiB boundary and, on the host, at DMA_MRRS, with up to DMA_TAGS reads in flight. The
//          data lands, line by line and in any order, in a ring buffer at the job's position;
//   write: the destination range is written in requests split at 4 KiB and, on the host, at
//          DMA_MPS; each beat is shifted out of two ring lines to the destination alignment once
//          both have arrived. A job completes when the response to its last write returns.
// Both sides talk to ports through the same request/completion interface (dma_axi_port.v); the
// host port also carries descriptor fetches (tag DESC_TAG) and the status write-back.
//
// Errors stop the chain at the failing descriptor: no new requests are issued, jobs before it
// finish, a write request already started is completed with empty strobes, and once nothing is
// in flight the status is written back and the error interrupt raised.
module dma_engine #(
    parameter integer DATA_WIDTH = 512,      // data width of both ports (one line per beat)
    parameter integer CARD_ADDR_WIDTH = 32,  // card address bits; card ranges beyond are errors
    parameter integer RING_LINES = 512,      // ring buffer lines (a power of two, >= 128)
    parameter integer WR_OUTSTANDING = 16    // write requests in flight (a power of two)
) (
    input  wire                       clk,
    input  wire                       rst,

    // channel control from the register block
    input  wire [3*64-1:0]            ch_desc_addr,
    input  wire [3*64-1:0]            ch_wb_addr,
    input  wire [2:0]                 ch_run,       // pulse: start a chain
    input  wire [2:0]                 ch_reset,     // pulse: stop and reset the channel
    input  wire [12:0]                cfg_mps,
    input  wire [12:0]                cfg_mrrs,
    input  wire [7:0]                 cfg_tags,

    // channel status to the register block
    output wire [2:0]                 ch_busy,
    output wire [2:0]                 ch_done,
    output wire [2:0]                 ch_error,
    output wire [3*8-1:0]             ch_err_code,
    output wire [3*32-1:0]            ch_completed,
    output wire [3*64-1:0]            ch_bytes,
    output wire [3*32-1:0]            ch_descs,
    output wire [2:0]                 irq_done,     // pulse: chain done and asked for it
    output wire [2:0]                 irq_err,      // pulse: chain stopped on an error

    // host port (index 0) and card port (index 1): read requests / completions
    output wire [1:0]                 rd_req_valid,
    input  wire [1:0]                 rd_req_ready,
    output wire [2*64-1:0]            rd_req_addr,
    output wire [2*13-1:0]            rd_req_len,
    output wire [2*6-1:0]             rd_req_tag,
    input  wire [1:0]                 rd_cpl_valid,
    output wire [1:0]                 rd_cpl_ready,
    input  wire [2*6-1:0]             rd_cpl_tag,
    input  wire [2*DATA_WIDTH-1:0]    rd_cpl_data,
    input  wire [1:0]                 rd_cpl_last,
    input  wire [1:0]                 rd_cpl_err,

    // host port (index 0) and card port (index 1): write requests / data / completions
    output wire [1:0]                 wr_req_valid,
    input  wire [1:0]                 wr_req_ready,
    output wire [63:0]                wr_req_addr,
    output wire [12:0]                wr_req_len,
    output wire [1:0]                 wr_dat_valid,
    input  wire [1:0]                 wr_dat_ready,
    output wire [DATA_WIDTH-1:0]      wr_dat_data,
    output wire [DATA_WIDTH/8-1:0]    wr_dat_strb,
    output wire                       wr_dat_last,
    input  wire [1:0]                 wr_cpl_valid,
    input  wire [1:0]                 wr_cpl_err
);

localparam integer LB = DATA_WIDTH / 8;          // bytes per line
localparam integer LS = $clog2(LB);              // line shift
localparam integer RB = $clog2(RING_LINES);      // ring index bits
localparam integer NT = `DMA_MAX_TAGS;           // data read tags per chain
localparam [5:0]   DESC_TAG = 6'd32;             // tag of descriptor fetches on the host port
localparam integer WB = $clog2(WR_OUTSTANDING);
localparam integer JOBS = 4;                     // jobs between the read and write stages
localparam integer DFIFO = 16;                   // fetched descriptors waiting for the read stage
localparam integer DFB = 4;                      // its pointer bits
localparam integer HOST = 0;
localparam integer CARD = 1;
localparam [1:0]   CH_H2C = 2'd0;
localparam [1:0]   CH_C2H = 2'd1;

initial begin
    if (DATA_WIDTH != 512)
        $fatal(1, "dma_engine: DATA_WIDTH must be 512 (two descriptors per beat), got %0d",
               DATA_WIDTH);
    if (RING_LINES < 128 || (RING_LINES & (RING_LINES - 1)) != 0)
        $fatal(1, "dma_engine: RING_LINES must be a power of two >= 128, got %0d", RING_LINES);
    if (WR_OUTSTANDING < 2 || (WR_OUTSTANDING & (WR_OUTSTANDING - 1)) != 0)
        $fatal(1, "dma_engine: WR_OUTSTANDING must be a power of two >= 2");
    if (CARD_ADDR_WIDTH < 12 || CARD_ADDR_WIDTH > 63)
        $fatal(1, "dma_engine: CARD_ADDR_WIDTH must be 12..63");
end

// ---------------------------------------------------------------------------------------------
// Channel status and chain control
localparam [2:0] S_IDLE = 3'd0, S_RUN = 3'd1, S_WB_REQ = 3'd2, S_WB_DAT = 3'd3, S_WB_CPL = 3'd4,
                 S_FINISH = 3'd5;

reg [2:0]   state;
reg [1:0]   cur;                 // channel of the running chain
reg [2:0]   pending;             // channels waiting for the mover
reg [1:0]   rr_last;
reg [2:0]   busy_r, done_r, error_r;
reg [7:0]   code_r [0:2];
reg [31:0]  completed_r [0:2];
reg [63:0]  bytes_r [0:2];
reg [31:0]  descs_r [0:2];
reg [2:0]   irq_done_r, irq_err_r;

reg         err_flag;            // the running chain has an error
reg [7:0]   err_code;
reg [31:0]  err_idx;             // first failing descriptor
reg         abort;               // reset of the running channel
reg         irq_req;             // a completed descriptor asked for the done interrupt
reg         chain_done;          // the STOP job completed
reg [31:0]  jobs_done;
reg [12:0]  mps, mrrs;
reg [7:0]   tags;
reg [63:0]  wb_addr;
reg         wb_two;              // the write-back spans two lines
reg         wb_beat;

// ---------------------------------------------------------------------------------------------
// Fetch stage
reg         f_active;            // more descriptors to fetch
reg [63:0]  f_addr;              // address of the next descriptor of the chain
reg         f_out;               // a fetch is in flight
reg         f_beat;              // second beat expected (single unaligned descriptor)
reg [DATA_WIDTH-1:0] f_data0;
reg         f_err;
reg         f_block;             // the fetch in flight is an aligned block of descriptors
reg [63:0]  f_lo, f_end;         // its byte range
reg [63:0]  f_line;              // line address of its next beat
reg [31:0]  df_len [0:DFIFO-1];
reg [63:0]  df_src [0:DFIFO-1];
reg [63:0]  df_dst [0:DFIFO-1];
reg [DFIFO-1:0] df_stop, df_irq;
reg [7:0]   df_code [0:DFIFO-1];
reg [DFB:0] df_count;
reg [DFB-1:0] df_wp, df_rp;

// ---------------------------------------------------------------------------------------------
// Read stage
reg         r_active;            // a job's source is being read
reg [63:0]  r_addr;              // next source byte to request
reg [31:0]  r_left;              // source bytes not yet requested
reg [RB:0]  alloc_abs;           // next ring line to allocate (absolute, one lap bit)
reg [31:0]  r_idx;               // index of the job being read (== jobs started)
reg [NT-1:0] tag_busy;
reg [RB:0]  tag_line [0:NT-1];   // absolute ring line of each tag's next beat
reg [31:0]  tag_job [0:NT-1];    // job each tag reads for
reg [RING_LINES-1:0] line_lap;   // lap bit of the data in each ring line
reg [DATA_WIDTH-1:0] ring [0:RING_LINES-1];

// Jobs between the read and write stages
reg [63:0]  j_src [0:JOBS-1];
reg [63:0]  j_dst [0:JOBS-1];
reg [31:0]  j_len [0:JOBS-1];
reg [RB:0]  j_base [0:JOBS-1];   // absolute ring line of the job's first source line
reg [31:0]  j_idx [0:JOBS-1];
reg [JOBS-1:0] j_stop, j_irq;
reg [2:0]   j_count;             // jobs held (written out or not)
reg [1:0]   j_wp;                // next free slot
reg [1:0]   j_ip;                // job whose write requests are being issued
reg [2:0]   j_icount;            // jobs whose write requests are not all issued
reg [1:0]   j_sp;                // job whose beats are being streamed

// ---------------------------------------------------------------------------------------------
// Write stage
reg [63:0]  w_addr;              // next destination byte to request (issue side)
reg [31:0]  w_left;
reg         w_istarted;          // the issue side has begun job j_ip
reg [8:0]   wq_beats [0:WR_OUTSTANDING-1];   // beats of each issued request
reg [WR_OUTSTANDING-1:0] wq_dead;            // request issued after the error (empty strobes)
reg [WB:0]  wq_count;            // requests issued whose beats are not all sent
reg [WB-1:0] wq_wp, wq_rp;
reg [8:0]   s_left;              // beats left in the request being streamed (0: none)
reg [31:0]  s_beat;              // beat index inside the job
reg         s_active;            // streaming a request
reg         s_dead;
// write completions: one entry per issued request
reg [WR_OUTSTANDING-1:0] aq_last, aq_dead;
reg [1:0]   aq_job [0:WR_OUTSTANDING-1];
reg [WB:0]  aq_count;
reg [WB-1:0] aq_wp, aq_rp;

integer i;

// ---------------------------------------------------------------------------------------------
// Helpers
function [63:0] bsel;            // 64-bit field of a flattened channel bus
    input [3*64-1:0] bus;
    input [1:0] ch;
    bsel = bus[ch*64 +: 64];
endfunction

function pow2_in;                // power of two in [128, 4096]
    input [12:0] v;
    pow2_in = (v >= 13'd128) && (v <= 13'd4096) && ((v & (v - 13'd1)) == 13'd0);
endfunction

wire src_host = cur == CH_H2C;
wire dst_host = cur == CH_C2H;
wire src_port = !src_host;        // port index: HOST (0) or CARD (1)
wire dst_port = !dst_host;
wire running = state == S_RUN;
wire stopping = err_flag || abort;

// ---------------------------------------------------------------------------------------------
// Fetch stage: one read in flight. A 32-byte aligned descriptor is fetched with the ones after
// it in memory (up to the room in the FIFO, the MRRS block and the 4 KiB page), as XDMA fetches
// adjacent descriptors; a fetched descriptor is used only if the chain's next pointer leads to
// it, so a chain that is not contiguous costs a refetch, never a wrong descriptor.
wire [DFB:0] df_free = DFIFO[DFB:0] - df_count;
wire [12:0] f_page_left = 13'd4096 - {1'b0, f_addr[11:0]};
wire [12:0] f_mrrs_left = mrrs - ({1'b0, f_addr[11:0]} & (mrrs - 13'd1));
wire [12:0] f_room = {3'd0, df_free, 5'd0};
wire [12:0] f_cap0 = (f_page_left < f_mrrs_left) ? f_page_left : f_mrrs_left;
wire [12:0] f_cap = (f_cap0 < f_room) ? f_cap0 : f_room;
wire        f_aligned = f_addr[4:0] == 5'd0;
wire [12:0] f_req_len = f_aligned ? {f_cap[12:5], 5'd0} : 13'd32;
wire f_issue = running && !stopping && f_active && !f_out && df_free != 0;

// Descriptor completion on the host port.
wire h_cpl_desc = rd_cpl_valid[HOST] && rd_cpl_tag[5:0] == DESC_TAG;
wire f_last_beat = h_cpl_desc && rd_cpl_last[HOST];
// The single (unaligned) descriptor of a fetch, cut out of its one or two beats; computed only
// while its completion arrives (the only time it is read), not for every change of the port.
reg  [2*DATA_WIDTH-1:0] f_pair;
reg  [255:0] f_desc;
always @* begin
    f_pair = {2*DATA_WIDTH{1'b0}};
    f_desc = 256'd0;
    if (h_cpl_desc && !f_block) begin
        f_pair = f_beat ? {rd_cpl_data[HOST*DATA_WIDTH +: DATA_WIDTH], f_data0}
                        : {{DATA_WIDTH{1'b0}}, rd_cpl_data[HOST*DATA_WIDTH +: DATA_WIDTH]};
        f_desc = f_pair[{1'b0, f_addr[LS-1:0], 3'b000} +: 256];
    end
end
wire [15:0]  f_magic = f_desc[`DESC_MAGIC_LSB +: 16];
wire         f_stop = f_desc[`DESC_CTRL_STOP_BIT];
wire         f_irq = f_desc[`DESC_CTRL_COMPLETED_BIT];
wire [31:0]  f_len = f_desc[63:32];
wire [63:0]  f_src = f_desc[127:64];
wire [63:0]  f_dst = f_desc[191:128];
wire [63:0]  f_next = f_desc[255:192];
wire         f_bad_err = f_err || rd_cpl_err[HOST];
wire [7:0]   f_code = f_bad_err ? `DMA_ERR_DESC_READ
                   : (f_magic != `DESC_MAGIC) ? `DMA_ERR_BAD_MAGIC
                   : (f_len == 32'd0) ? `DMA_ERR_ZERO_LENGTH
                   : `DMA_ERR_NONE;

// Block fetch: each beat holds the descriptors at its line address and 32 bytes above.
function [7:0] desc_code;
    input [255:0] d;
    input         bus_err;
    desc_code = bus_err ? `DMA_ERR_DESC_READ
              : (d[`DESC_MAGIC_LSB +: 16] != `DESC_MAGIC) ? `DMA_ERR_BAD_MAGIC
              : (d[63:32] == 32'd0) ? `DMA_ERR_ZERO_LENGTH
              : `DMA_ERR_NONE;
endfunction
wire [DATA_WIDTH-1:0] b_data = rd_cpl_data[HOST*DATA_WIDTH +: DATA_WIDTH];
wire [255:0] b_d0 = b_data[255:0];
wire [255:0] b_d1 = b_data[511:256];
wire [63:0]  b_a0 = f_line;
wire [63:0]  b_a1 = f_line + 64'd32;
wire [7:0]   b_c0 = desc_code(b_d0, rd_cpl_err[HOST]);
wire [7:0]   b_c1 = desc_code(b_d1, rd_cpl_err[HOST]);
wire         b_step = h_cpl_desc && f_block && !stopping;
wire         b_take0 = b_step && f_active && b_a0 >= f_lo && b_a0 < f_end && b_a0 == f_addr;
wire         b_more0 = b_take0 ? (b_c0 == `DMA_ERR_NONE && !b_d0[`DESC_CTRL_STOP_BIT]) : f_active;
wire [63:0]  b_next0 = b_take0 ? b_d0[255:192] : f_addr;
wire         b_take1 = b_step && b_more0 && b_a1 >= f_lo && b_a1 < f_end && b_a1 == b_next0;
wire         b_more1 = b_take1 ? (b_c1 == `DMA_ERR_NONE && !b_d1[`DESC_CTRL_STOP_BIT]) : b_more0;
wire [63:0]  b_next1 = b_take1 ? b_d1[255:192] : b_next0;
// the single (unaligned) path pushes at its last beat
wire         u_push = h_cpl_desc && !f_block && f_last_beat && !stopping;
wire [1:0]   f_pushes = {1'b0, b_take0} + {1'b0, b_take1} + {1'b0, u_push};

// ---------------------------------------------------------------------------------------------
// Read stage
wire [7:0]   d_code = df_code[df_rp];
wire [31:0]  d_len = df_len[df_rp];
wire [63:0]  d_src = df_src[df_rp];
wire [63:0]  d_dst = df_dst[df_rp];
wire         d_stop = df_stop[df_rp];
wire         d_irq = df_irq[df_rp];

// Card ranges must fit the card address space (else the port would alias them).
function card_range_bad;
    input [63:0] a;
    input [31:0] n;
    card_range_bad = (({1'b0, a} + {33'd0, n} - 65'd1) >> CARD_ADDR_WIDTH) != 65'd0;
endfunction

wire d_src_bad = !src_host && card_range_bad(d_src, d_len);
wire d_dst_bad = !dst_host && card_range_bad(d_dst, d_len);
wire job_start = running && !stopping && !r_active && df_count != 0 && j_count < JOBS[2:0];

// Next read request of the job: up to the next boundary (MRRS on the host, 4 KiB on the card).
wire [12:0] r_bound = src_host ? mrrs : 13'd4096;
wire [12:0] r_to_bound = r_bound - ({1'b0, r_addr[11:0]} & (r_bound - 13'd1));
wire [12:0] r_len = (r_left < {19'd0, r_to_bound}) ? r_left[12:0] : r_to_bound;
wire [63:0] r_last_byte = r_addr + {51'd0, r_len} - 64'd1;
wire [63:0] r_nlines = (r_last_byte >> LS) - (r_addr >> LS) + 64'd1;
wire [RB:0] r_lines = r_nlines[RB:0];
wire [RB:0] ring_used = alloc_abs - free_abs;
wire [RB+1:0] ring_need = {1'b0, ring_used} + {1'b0, r_lines};
wire        ring_room = ring_need <= RING_LINES[RB+1:0];
reg  [5:0]  free_tag;
reg         have_tag;
always @* begin
    have_tag = 1'b0;
    free_tag = 6'd0;
    for (i = NT - 1; i >= 0; i = i - 1) begin
        if (!tag_busy[i] && i < tags) begin
            have_tag = 1'b1;
            free_tag = i[5:0];
        end
    end
end
wire r_issue = running && !stopping && r_active && r_left != 0 && ring_room && have_tag;

// Host read request: descriptor fetches first.
wire f_take = f_issue && rd_req_ready[HOST];
wire r_on_host = src_host;
wire r_take = r_issue && (r_on_host ? (!f_issue && rd_req_ready[HOST]) : rd_req_ready[CARD]);

assign rd_req_valid[HOST] = f_issue || (r_issue && r_on_host);
assign rd_req_valid[CARD] = r_issue && !r_on_host;
// The host port carries descriptor fetches and (H2C) data reads; the card port data reads only.
assign rd_req_addr = {r_addr, f_issue ? f_addr : r_addr};
assign rd_req_len = {r_len, f_issue ? f_req_len : r_len};
assign rd_req_tag = {free_tag, f_issue ? DESC_TAG : free_tag};

// Data completions: always accepted (the ring space was reserved at request time).
assign rd_cpl_ready = 2'b11;
wire [5:0]  c_tag = rd_cpl_tag[src_port*6 +: 6];
wire        c_valid = rd_cpl_valid[src_port] && !(!src_port && c_tag == DESC_TAG);
wire [RB:0] c_line = tag_line[c_tag[4:0]];

// ---------------------------------------------------------------------------------------------
// Write stage: issue side
reg [RB:0] free_abs;             // first ring line not yet released
wire [63:0] ji_dst = j_dst[j_ip];
wire [31:0] ji_len = j_len[j_ip];
wire [31:0] ji_idx = j_idx[j_ip];
wire [63:0] wi_addr = w_istarted ? w_addr : ji_dst;
wire [31:0] wi_left = w_istarted ? w_left : ji_len;
wire [12:0] w_bound = dst_host ? mps : 13'd4096;
wire [12:0] w_to_bound = w_bound - ({1'b0, wi_addr[11:0]} & (w_bound - 13'd1));
wire [12:0] w_len = (wi_left < {19'd0, w_to_bound}) ? wi_left[12:0] : w_to_bound;
wire [63:0] w_last_byte = wi_addr + {51'd0, w_len} - 64'd1;
wire [63:0] w_nbeats = (w_last_byte >> LS) - (wi_addr >> LS) + 64'd1;
wire [8:0]  w_beats = w_nbeats[8:0];
wire        w_job_dead = stopping && (abort || ji_idx >= err_idx);
wire        w_issue = running && j_icount != 0 && !w_job_dead && wq_count < WR_OUTSTANDING[WB:0]
                      && aq_count < WR_OUTSTANDING[WB:0];
wire        w_last_req = w_len == wi_left[12:0] && wi_left[31:13] == 0;

// Write stage: streaming side (job j_sp)
wire [63:0] js_src = j_src[j_sp];
wire [63:0] js_dst = j_dst[j_sp];
wire [31:0] js_len = j_len[j_sp];
wire [RB:0] js_base = j_base[j_sp];
wire [31:0] js_idx = j_idx[j_sp];
wire        sh_neg = js_src[LS-1:0] < js_dst[LS-1:0];
wire [LS-1:0] sh = js_src[LS-1:0] - js_dst[LS-1:0];      // (src - dst) mod LB
// Source lines of the job: [0, js_lines)
wire [63:0] js_src_last = js_src + {32'd0, js_len} - 64'd1;
wire [31:0] js_lines = js_src_last[LS +: 32] - js_src[LS +: 32] + 32'd1;
// Beat s_beat uses source lines b and b+1 (job relative), b = s_beat - (sh_neg ? 1 : 0).
wire [32:0] s_b = {1'b0, s_beat} - {32'd0, sh_neg};
wire        s_b_in = !s_b[32] && s_b[31:0] < js_lines;
wire        s_b1_in = (s_b[31:0] + 32'd1) < js_lines;      // s_b + 1 >= 0 always
wire [RB:0] s_abs0 = js_base + s_b[RB:0];
wire [RB:0] s_abs1 = s_abs0 + 1'b1;
wire        s_have0 = !s_b_in || line_lap[s_abs0[RB-1:0]] == s_abs0[RB];
wire        s_have1 = !s_b1_in || line_lap[s_abs1[RB-1:0]] == s_abs1[RB];
wire [2*DATA_WIDTH-1:0] s_pair = {ring[s_abs1[RB-1:0]], ring[s_abs0[RB-1:0]]};
wire [DATA_WIDTH-1:0] s_data = s_pair[{1'b0, sh, 3'b000} +: DATA_WIDTH];
// Strobes: destination byte j = s_beat*LB + lane - dst%LB must lie in [0, len).
wire [63:0] js_dst_last = js_dst + {32'd0, js_len} - 64'd1;
wire [31:0] js_beats = js_dst_last[LS +: 32] - js_dst[LS +: 32] + 32'd1;
wire        s_first = s_beat == 0;
wire        s_lastb = s_beat == js_beats - 32'd1;
reg  [LB-1:0] s_strb;
always @* begin
    for (i = 0; i < LB; i = i + 1)
        s_strb[i] = (!s_first || i >= js_dst[LS-1:0]) && (!s_lastb || i <= js_dst_last[LS-1:0]);
end
wire s_job_dead = stopping && (abort || js_idx >= err_idx);
wire s_go_dead = s_active && (s_dead || s_job_dead);
wire s_ready_data = s_active && (s_go_dead || (s_have0 && s_have1));

// Write-back beat
wire [2*DATA_WIDTH-1:0] wb_pair = {{2*DATA_WIDTH-64{1'b0}},
    {16'd0, code_r[cur], 5'd0, error_r[cur], done_r[cur], 1'b0}, completed_r[cur]}
    << {wb_addr[LS-1:0], 3'b000};
wire [2*LB-1:0] wb_pstrb = {{2*LB-8{1'b0}}, 8'hFF} << wb_addr[LS-1:0];
wire wb_phase = state == S_WB_DAT;

// Write request and data outputs
assign wr_req_valid[HOST] = (state == S_WB_REQ) || (w_issue && dst_host);
assign wr_req_valid[CARD] = w_issue && !dst_host && state != S_WB_REQ;
assign wr_req_addr = state == S_WB_REQ ? wb_addr : wi_addr;
assign wr_req_len = state == S_WB_REQ ? 13'd8 : w_len;
wire w_take = w_issue && state != S_WB_REQ && wr_req_ready[dst_port];

assign wr_dat_valid[HOST] = wb_phase || (s_ready_data && dst_host);
assign wr_dat_valid[CARD] = s_ready_data && !dst_host && !wb_phase;
// Bytes outside the strobes are driven as zero, not as whatever the ring line held.
reg [DATA_WIDTH-1:0] s_data_masked;
always @* begin
    for (i = 0; i < LB; i = i + 1)
        s_data_masked[i*8 +: 8] = (s_strb[i] && !s_go_dead) ? s_data[i*8 +: 8] : 8'd0;
end
assign wr_dat_data = wb_phase ? (wb_beat ? wb_pair[DATA_WIDTH +: DATA_WIDTH]
                                         : wb_pair[0 +: DATA_WIDTH])
                              : s_data_masked;
assign wr_dat_strb = wb_phase ? (wb_beat ? wb_pstrb[LB +: LB] : wb_pstrb[0 +: LB])
                              : (s_go_dead ? {LB{1'b0}} : s_strb);
assign wr_dat_last = wb_phase ? (wb_beat || !wb_two) : (s_left == 9'd1);
wire s_take = !wb_phase && s_ready_data && wr_dat_ready[dst_port];
wire s_load = wq_count != 0 && !wb_phase && (!s_active || (s_take && s_left == 9'd1));

// Write completions: in order, one per request (or the write-back).
wire a_valid = wr_cpl_valid[dst_port] && state != S_WB_CPL;
wire a_err = wr_cpl_err[dst_port];
wire a_last = aq_last[aq_rp];
wire a_dead = aq_dead[aq_rp];
wire [1:0] a_job = aq_job[aq_rp];

// ---------------------------------------------------------------------------------------------
// Sequential logic
// Round robin over waiting channels, starting after the one served last.
function [1:0] nxt;
    input [1:0] c;
    nxt = (c == 2'd2) ? 2'd0 : c + 2'd1;
endfunction
wire [1:0] rr1 = nxt(rr_last);
wire [1:0] rr2 = nxt(rr1);
wire       pick_any = |pending;
wire [1:0] pick = pending[rr1] ? rr1 : pending[rr2] ? rr2 : rr_last;

wire issue_done = j_icount == 0 || w_job_dead;
wire drained = tag_busy == 0 && !f_out && wq_count == 0 && aq_count == 0 && !s_active
               && issue_done;

always @(posedge clk) begin
    irq_done_r <= 3'd0;
    irq_err_r <= 3'd0;

    // --- run and reset requests
    for (i = 0; i < 3; i = i + 1) begin
        if (ch_run[i] && !busy_r[i] && !ch_reset[i]) begin
            busy_r[i] <= 1'b1;
            pending[i] <= 1'b1;
            done_r[i] <= 1'b0;
            error_r[i] <= 1'b0;
            code_r[i] <= `DMA_ERR_NONE;
            completed_r[i] <= 32'd0;
        end
        if (ch_reset[i]) begin
            pending[i] <= 1'b0;
            if (!busy_r[i]) begin
                done_r[i] <= 1'b0;
                error_r[i] <= 1'b0;
                code_r[i] <= `DMA_ERR_NONE;
                completed_r[i] <= 32'd0;
            end else if (!(state != S_IDLE && cur == i[1:0])) begin
                // waiting, not started: stops at once
                busy_r[i] <= 1'b0;
                error_r[i] <= 1'b1;
                code_r[i] <= `DMA_ERR_ABORTED;
                irq_err_r[i] <= 1'b1;
            end
        end
    end
    if (state != S_IDLE && ch_reset[cur])
        abort <= 1'b1;

    case (state)
    S_IDLE: begin
        if (pick_any && !ch_reset[pick]) begin
            cur <= pick;
            rr_last <= pick;
            pending[pick] <= 1'b0;
            mps <= cfg_mps;
            mrrs <= cfg_mrrs;
            tags <= cfg_tags;
            wb_addr <= bsel(ch_wb_addr, pick);
            f_addr <= bsel(ch_desc_addr, pick);
            f_active <= 1'b1;
            r_idx <= 32'd0;
            jobs_done <= 32'd0;
            err_flag <= 1'b0;
            err_code <= `DMA_ERR_NONE;
            err_idx <= 32'hFFFF_FFFF;
            abort <= 1'b0;
            irq_req <= 1'b0;
            chain_done <= 1'b0;
            if (!pow2_in(cfg_mps) || !pow2_in(cfg_mrrs) || cfg_tags == 0 || cfg_tags > NT[7:0]) begin
                err_flag <= 1'b1;
                err_code <= `DMA_ERR_BAD_CONFIG;
                err_idx <= 32'd0;
                f_active <= 1'b0;
            end
            state <= S_RUN;
        end
    end
    S_RUN: begin
        // The chain ends when the STOP job completed, or when an error or abort has drained.
        if ((chain_done && !stopping) || (stopping && drained)) begin
            if (stopping) begin
                error_r[cur] <= 1'b1;
                code_r[cur] <= abort ? `DMA_ERR_ABORTED : err_code;
                completed_r[cur] <= (jobs_done < err_idx) ? jobs_done : err_idx;
            end else begin
                done_r[cur] <= 1'b1;
                completed_r[cur] <= jobs_done;
            end
            state <= (wb_addr != 64'd0 && !abort) ? S_WB_REQ : S_FINISH;
        end
    end
    S_WB_REQ: if (wr_req_ready[HOST]) begin
        state <= S_WB_DAT;
        wb_beat <= 1'b0;
    end
    S_WB_DAT: if (wr_dat_ready[HOST]) begin
        if (wb_beat || !wb_two) state <= S_WB_CPL;
        wb_beat <= 1'b1;
    end
    S_WB_CPL: if (wr_cpl_valid[HOST]) begin
        if (wr_cpl_err[HOST] && !error_r[cur]) begin
            done_r[cur] <= 1'b0;
            error_r[cur] <= 1'b1;
            code_r[cur] <= `DMA_ERR_STATUS_WRITE;
        end
        state <= S_FINISH;
    end
    default: begin // S_FINISH: status is final; raise the interrupt
        state <= S_IDLE;
        busy_r[cur] <= 1'b0;
        if (error_r[cur]) irq_err_r[cur] <= 1'b1;
        else irq_done_r[cur] <= irq_req;
    end
    endcase
    wb_two <= {1'b0, wb_addr[LS-1:0]} + 8 > LB[LS:0];

    // --- fetch stage
    if (f_take) begin
        f_out <= 1'b1;
        f_beat <= 1'b0;
        f_err <= 1'b0;
        f_block <= f_aligned;
        f_lo <= f_addr;
        f_end <= f_addr + {51'd0, f_req_len};
        f_line <= {f_addr[63:LS], {LS{1'b0}}};
    end
    if (h_cpl_desc && f_block) begin
        f_line <= f_line + 64'd64;
        if (f_last_beat) f_out <= 1'b0;
        if (!stopping) begin
            f_active <= b_more1;
            f_addr <= b_next1;
            if (b_take0) begin
                df_len[df_wp] <= b_d0[63:32];
                df_src[df_wp] <= b_d0[127:64];
                df_dst[df_wp] <= b_d0[191:128];
                df_stop[df_wp] <= b_d0[`DESC_CTRL_STOP_BIT];
                df_irq[df_wp] <= b_d0[`DESC_CTRL_COMPLETED_BIT];
                df_code[df_wp] <= b_c0;
            end
            if (b_take1) begin
                df_len[df_wp + {{DFB-1{1'b0}}, b_take0}] <= b_d1[63:32];
                df_src[df_wp + {{DFB-1{1'b0}}, b_take0}] <= b_d1[127:64];
                df_dst[df_wp + {{DFB-1{1'b0}}, b_take0}] <= b_d1[191:128];
                df_stop[df_wp + {{DFB-1{1'b0}}, b_take0}] <= b_d1[`DESC_CTRL_STOP_BIT];
                df_irq[df_wp + {{DFB-1{1'b0}}, b_take0}] <= b_d1[`DESC_CTRL_COMPLETED_BIT];
                df_code[df_wp + {{DFB-1{1'b0}}, b_take0}] <= b_c1;
            end
            df_wp <= df_wp + {{DFB-2{1'b0}}, f_pushes};
        end
    end
    if (h_cpl_desc && !f_block) begin
        if (!f_last_beat) begin
            f_beat <= 1'b1;
            f_data0 <= rd_cpl_data[HOST*DATA_WIDTH +: DATA_WIDTH];
            f_err <= f_err || rd_cpl_err[HOST];
        end else begin
            f_out <= 1'b0;
            if (!stopping) begin
                df_len[df_wp] <= f_len;
                df_src[df_wp] <= f_src;
                df_dst[df_wp] <= f_dst;
                df_stop[df_wp] <= f_stop;
                df_irq[df_wp] <= f_irq;
                df_code[df_wp] <= f_code;
                df_wp <= df_wp + 1'b1;
                if (f_code != `DMA_ERR_NONE || f_stop)
                    f_active <= 1'b0;
                else
                    f_addr <= f_next;
            end
        end
    end

    // --- read stage: start a job
    if (job_start) begin
        df_rp <= df_rp + 1'b1;
        if (d_code != `DMA_ERR_NONE || d_src_bad || d_dst_bad) begin
            err_flag <= 1'b1;
            err_code <= d_code != `DMA_ERR_NONE ? d_code
                      : d_src_bad ? `DMA_ERR_SRC_READ : `DMA_ERR_DST_WRITE;
            if (r_idx < err_idx) err_idx <= r_idx;
        end else begin
            r_active <= 1'b1;
            r_addr <= d_src;
            r_left <= d_len;
            j_src[j_wp] <= d_src;
            j_dst[j_wp] <= d_dst;
            j_len[j_wp] <= d_len;
            j_base[j_wp] <= alloc_abs;
            j_idx[j_wp] <= r_idx;
            j_stop[j_wp] <= d_stop;
            j_irq[j_wp] <= d_irq;
            j_wp <= j_wp + 1'b1;
            r_idx <= r_idx + 32'd1;
        end
    end
    if (r_take) begin
        r_addr <= r_addr + {51'd0, r_len};
        r_left <= r_left - {19'd0, r_len};
        if (r_left == {19'd0, r_len}) r_active <= 1'b0;
        tag_busy[free_tag[4:0]] <= 1'b1;
        // A job's lines are contiguous and requests split at aligned boundaries never share a
        // line, so each request's first line is the next one to allocate.
        tag_line[free_tag[4:0]] <= alloc_abs;
        tag_job[free_tag[4:0]] <= r_idx - 32'd1;
        alloc_abs <= alloc_abs + r_lines;
    end
    if (c_valid) begin
        ring[c_line[RB-1:0]] <= rd_cpl_data[src_port*DATA_WIDTH +: DATA_WIDTH];
        line_lap[c_line[RB-1:0]] <= c_line[RB];
        tag_line[c_tag[4:0]] <= c_line + 1'b1;
        if (rd_cpl_last[src_port])
            tag_busy[c_tag[4:0]] <= 1'b0;
        if (rd_cpl_err[src_port]) begin
            if (!err_flag) err_code <= `DMA_ERR_SRC_READ;
            err_flag <= 1'b1;
            if (tag_job[c_tag[4:0]] < err_idx) err_idx <= tag_job[c_tag[4:0]];
        end
    end

    // --- write stage: issue
    if (w_take) begin
        if (w_last_req) begin
            w_istarted <= 1'b0;
            j_ip <= j_ip + 1'b1;
        end else begin
            w_istarted <= 1'b1;
            w_addr <= wi_addr + {51'd0, w_len};
            w_left <= wi_left - {19'd0, w_len};
        end
        wq_beats[wq_wp] <= w_beats;
        wq_dead[wq_wp] <= 1'b0;
        wq_wp <= wq_wp + 1'b1;
        aq_last[aq_wp] <= w_last_req;
        aq_dead[aq_wp] <= 1'b0;
        aq_job[aq_wp] <= j_ip;
        aq_wp <= aq_wp + 1'b1;
    end

    // --- write stage: stream beats (the next request loads as the last beat of one goes out,
    // so back-to-back requests stream without a bubble)
    if (s_take) begin
        s_left <= s_left - 9'd1;
        if (s_left == 9'd1) s_active <= 1'b0;
        if (s_lastb) s_beat <= 32'd0;
        else s_beat <= s_beat + 32'd1;
        // release ring lines the next beats no longer need
        if (s_lastb) begin
            free_abs <= js_base + js_lines[RB:0];
            j_sp <= j_sp + 1'b1;
        end else if (s_b_in) begin
            free_abs <= s_abs0 + 1'b1;
        end
    end
    if (s_load) begin
        s_active <= 1'b1;
        s_left <= wq_beats[wq_rp];
        s_dead <= wq_dead[wq_rp];
        wq_rp <= wq_rp + 1'b1;
    end

    // --- write completions
    if (a_valid) begin
        aq_rp <= aq_rp + 1'b1;
        if (a_err && !a_dead) begin
            if (!err_flag) begin
                err_flag <= 1'b1;
                err_code <= `DMA_ERR_DST_WRITE;
            end
            if (j_idx[a_job] < err_idx) err_idx <= j_idx[a_job];
        end else if (a_last && !a_dead && !abort && !(stopping && j_idx[a_job] >= err_idx)) begin
            jobs_done <= jobs_done + 32'd1;
            completed_r[cur] <= jobs_done + 32'd1;
            bytes_r[cur] <= bytes_r[cur] + {32'd0, j_len[a_job]};
            descs_r[cur] <= descs_r[cur] + 32'd1;
            if (j_irq[a_job]) irq_req <= 1'b1;
            if (j_stop[a_job]) chain_done <= 1'b1;
        end
    end

    // --- counts
    j_count <= j_count + {2'd0, job_start && d_code == `DMA_ERR_NONE && !d_src_bad && !d_dst_bad}
               - {2'd0, a_valid && a_last};
    j_icount <= j_icount + {2'd0, job_start && d_code == `DMA_ERR_NONE && !d_src_bad && !d_dst_bad}
                - {2'd0, w_take && w_last_req};
    df_count <= df_count + {{DFB-1{1'b0}}, f_pushes} - {{DFB{1'b0}}, job_start};
    wq_count <= wq_count + {{WB{1'b0}}, w_take} - {{WB{1'b0}}, s_load};
    aq_count <= aq_count + {{WB{1'b0}}, w_take} - {{WB{1'b0}}, a_valid};

    if (state == S_IDLE) begin
        // a new chain starts with empty pipes
        df_count <= {(DFB+1){1'b0}};
        df_wp <= {DFB{1'b0}};
        df_rp <= {DFB{1'b0}};
        j_count <= 3'd0;
        j_icount <= 3'd0;
        j_wp <= 2'd0;
        j_ip <= 2'd0;
        j_sp <= 2'd0;
        w_istarted <= 1'b0;
        s_beat <= 32'd0;
        r_active <= 1'b0;
        free_abs <= alloc_abs;   // lines of dropped jobs are released
    end

    if (rst) begin
        state <= S_IDLE;
        cur <= 2'd0;
        pending <= 3'd0;
        rr_last <= 2'd2;
        busy_r <= 3'd0;
        done_r <= 3'd0;
        error_r <= 3'd0;
        for (i = 0; i < 3; i = i + 1) begin
            code_r[i] <= 8'd0;
            completed_r[i] <= 32'd0;
            bytes_r[i] <= 64'd0;
            descs_r[i] <= 32'd0;
        end
        irq_done_r <= 3'd0;
        irq_err_r <= 3'd0;
        err_flag <= 1'b0;
        abort <= 1'b0;
        f_active <= 1'b0;
        f_out <= 1'b0;
        r_active <= 1'b0;
        tag_busy <= {NT{1'b0}};
        line_lap <= {RING_LINES{1'b1}};
        alloc_abs <= {(RB+1){1'b0}};
        free_abs <= {(RB+1){1'b0}};
        wq_count <= {(WB+1){1'b0}};
        wq_wp <= {WB{1'b0}};
        wq_rp <= {WB{1'b0}};
        aq_count <= {(WB+1){1'b0}};
        aq_wp <= {WB{1'b0}};
        aq_rp <= {WB{1'b0}};
        s_active <= 1'b0;
        s_left <= 9'd0;
        wb_beat <= 1'b0;
    end
end

genvar g;
generate for (g = 0; g < 3; g = g + 1) begin : g_out
    assign ch_err_code[g*8 +: 8] = code_r[g];
    assign ch_completed[g*32 +: 32] = completed_r[g];
    assign ch_bytes[g*64 +: 64] = bytes_r[g];
    assign ch_descs[g*32 +: 32] = descs_r[g];
end endgenerate
assign ch_busy = busy_r;
assign ch_done = done_r;
assign ch_error = error_r;
assign irq_done = irq_done_r;
assign irq_err = irq_err_r;

endmodule

`resetall
