`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "pcie_cfg.vh"

// PCIe requester adapter: the DMA engine's host-port request/completion interface (dma_engine.v;
// dma_axi_port.v is the AXI4 one) on the UltraScale+ hard IP's requester streams, 512 bits,
// DWORD-aligned (PG213's RQ/RC formats), in the card clock domain (the async FIFOs of
// card_top_pcie join it to the PCIe user clock).
//
// Straddling (STRADDLE = 1; the hard IP must be configured alike): on RQ two TLPs may share a
// beat, the second starting at DWORD 8 after one that ended in DWORDs 0..7 (tuser is_sop /
// is_eop with their pointers, first/last byte enables per TLP in the order they start); on RC the
// hard IP's straddled completions are taken, a TLP starting at DWORD 0, 4, 8 or 12 (the 4-TLP
// mode) or 0 and 8 (the 2-TLP mode). Both streams are built and read as without straddling (one
// TLP per run of beats, from DWORD 0, tlast) and converted at the edge: RQ beats are repacked in
// 256-bit halves (a TLP ending in a low half is held up to three cycles for the next TLP's first
// half; an abandoned TLP never shares a beat, since discontinue applies to the whole beat), RC
// TLPs are shifted down to DWORD 0 (the card clock, 400 MHz, carries the unstraddled beats faster
// than the user clock, 250 MHz, delivers the straddled ones). With STRADDLE = 0 (the default of
// this module) both streams are one TLP per run of beats. Everything below holds in both modes.
//
// RQ (requests out): a read request becomes one memory read TLP (tag = the engine's tag, client
// tags), a write request one memory write TLP whose payload is the engine's line-aligned beats
// realigned to DWORDs after the 4-DWORD descriptor, first/last byte enables from the request's
// byte range; a write the engine abandons (empty strobes) is discontinued, so the hard IP drops
// it. An MSI-X message is a one-DWORD memory write between TLPs. A write request is taken into a
// one-entry register ahead of its TLP, so the engine streams its lines right behind the previous
// TLP's. Writes are posted: the write completion is signalled when the TLP's last beat is handed
// on, so whatever the engine does after it (the status write-back, then the interrupt) follows it
// on the link (TLPs leave in the order they were built, in both modes).
//
// RC (completions in): each completion's payload is realigned to card lines (64-byte beats at
// the address the request asked for) and handed to the engine with its tag; completions of
// different tags may arrive in any order, split at the read completion boundary (a completer
// may split only at RCB-aligned addresses, so no line is ever split between two completions).
// The last line of the completion that completes the request carries last. A completion with
// a bad status (UR, CA), a poisoned one, or the hard IP's completion timeout, ends the request
// in error beats (below); a completion the hard IP flags as unexpected (invalid tag) is dropped. Completions
// of one request arrive in address order (PCIe), each starting at the line after the previous
// one's: a completion that does not (one before it was lost) has its data dropped and the tag is
// marked failed, and the completion that completes the request (or the hard IP's timeout, when
// the lost one was the last) ends it with error beats, as does one that completes the request
// short of its end. So a lost completion is a DMA error, never a hang or data in the wrong line.
// A request that ends in an error gets error beats for every line not yet delivered, the last
// with last (as an AXI read with an error response has all its beats), so the engine always
// receives exactly the lines it reserved for the request.
//
// Completion buffer budget: the hard IP advertises infinite completion credits, so its receive
// buffer (CPLH headers, CPLD 16-byte data credits, each completion one data credit beyond its
// payload's) must never hold more than it can: a read is issued only while its worst case fits
// what is not reserved, one header per RCB block (CPL_BUDGET_RCB) it touches and the data
// credits of its 16-byte blocks plus one per header. A completion's header and data credits are
// released when its last beat has been taken by the realignment (the hard IP freed them when it
// sent that beat, and with straddling the de-straddler hands on a TLP's last beat only after the
// hard IP's beat that ends it), the rest of a read's reservation when the completion that
// completes it has.
module pcie_rq_adapter #(
    parameter integer DATA_WIDTH = 512,      // engine and stream data width (DWORD-aligned RQ/RC)
    parameter integer CPLH = `PCIE_RC_BUFFER_CPLH,   // the hard IP's completion headers
    parameter integer CPLD = `PCIE_RC_BUFFER_CPLD,   // and 16-byte data credits
    parameter integer BUDGET_RCB = `PCIE_CPL_BUDGET_RCB,
    parameter integer STRADDLE = 0           // 1: straddled RQ (2 TLPs) and RC (2 or 4) beats
) (
    input  wire                      clk,
    input  wire                      rst,

    // engine: read requests and completions
    input  wire                      rd_req_valid,
    output wire                      rd_req_ready,
    input  wire [63:0]               rd_req_addr,
    input  wire [12:0]               rd_req_len,
    input  wire [5:0]                rd_req_tag,
    output wire                      rd_cpl_valid,
    input  wire                      rd_cpl_ready,
    output wire [5:0]                rd_cpl_tag,
    output wire [DATA_WIDTH-1:0]     rd_cpl_data,
    output wire                      rd_cpl_last,
    output wire                      rd_cpl_err,

    // engine: write requests, write data, write completions
    input  wire                      wr_req_valid,
    output wire                      wr_req_ready,
    input  wire [63:0]               wr_req_addr,
    input  wire [12:0]               wr_req_len,
    input  wire                      wr_dat_valid,
    output wire                      wr_dat_ready,
    input  wire [DATA_WIDTH-1:0]     wr_dat_data,
    input  wire [DATA_WIDTH/8-1:0]   wr_dat_strb,
    input  wire                      wr_dat_last,
    output wire                      wr_cpl_valid,
    output wire                      wr_cpl_err,

    // MSI-X message (pcie_msix.v): a one-DWORD memory write
    input  wire                      msix_valid,
    output wire                      msix_ready,
    input  wire [63:0]               msix_addr,
    input  wire [31:0]               msix_data,

    // requester request stream (to the hard IP): tuser is PG213's 512-bit RQ tuser [36:0]:
    // first_be [7:0], last_be [15:8] (per TLP starting in the beat, in order), is_sop [21:20],
    // is_sop_ptr [25:22], is_eop [27:26], is_eop_ptr [35:28], discontinue [36]. Without
    // straddling only first_be [3:0], last_be [11:8] and discontinue are driven (tlast ends a TLP).
    output wire [DATA_WIDTH-1:0]     m_axis_rq_tdata,
    output wire [DATA_WIDTH/32-1:0]  m_axis_rq_tkeep,
    output wire                      m_axis_rq_tlast,
    output wire [36:0]               m_axis_rq_tuser,
    output wire                      m_axis_rq_tvalid,
    input  wire                      m_axis_rq_tready,

    // requester completion stream (from the hard IP); sop_eop is PG213's 512-bit RC tuser
    // [95:64]: is_sop [3:0], is_sop_ptr [11:4], is_eop [15:12], is_eop_ptr [31:16] (used with
    // straddling; without it tlast ends a TLP)
    input  wire [DATA_WIDTH-1:0]     s_axis_rc_tdata,
    input  wire [31:0]               s_axis_rc_sop_eop,
    input  wire                      s_axis_rc_tlast,
    input  wire                      s_axis_rc_tvalid,
    output wire                      s_axis_rc_tready
);

localparam integer DW = DATA_WIDTH / 32;         // DWORDs per beat (16)
localparam [3:0] REQ_MEM_READ = 4'd0, REQ_MEM_WRITE = 4'd1;
localparam [3:0] ERR_POISONED = 4'd1, ERR_INVALID_TAG = 4'd6;

initial begin
    if (DATA_WIDTH != 512)
        $fatal(1, "pcie_rq_adapter: DATA_WIDTH must be 512, got %0d", DATA_WIDTH);
    if (STRADDLE != 0 && STRADDLE != 1)
        $fatal(1, "pcie_rq_adapter: STRADDLE must be 0 or 1, got %0d", STRADDLE);
    if (BUDGET_RCB != 64 && BUDGET_RCB != 128)
        $fatal(1, "pcie_rq_adapter: BUDGET_RCB must be 64 or 128, got %0d", BUDGET_RCB);
    if (CPLH < 4096 / BUDGET_RCB + 1 || CPLH > 511 || CPLD > 4095
        || CPLD < 4096 / 16 + 1 + 2 * (4096 / BUDGET_RCB + 1))
        $fatal(1, "pcie_rq_adapter: CPLH %0d / CPLD %0d cannot hold one 4 KiB read or do not fit",
               CPLH, CPLD);
end

// First and last byte enables of the byte range [addr, addr + len), len >= 1.
function [7:0] byte_enables;      // {last_be, first_be}
    input [1:0]  a;
    input [12:0] len;
    reg [13:0] end_off;
    reg [3:0] fbe, lbe;
    begin
        end_off = {12'd0, a} + {1'b0, len};          // one past the last byte, from the DWORD
        fbe = 4'b1111 << a;
        lbe = 4'b1111 >> (2'd3 - end_off[1:0] + 2'd1);
        if (end_off[1:0] == 2'd0) lbe = 4'b1111;
        if (end_off <= 14'd4) begin                  // one DWORD: first_be only
            byte_enables = {4'b0000, fbe & lbe};
        end else begin
            byte_enables = {lbe, fbe};
        end
    end
endfunction

// Byte offset in the first DWORD + length + 3: the DWORD count is its bits [12:2].
function [12:0] dword_span;
    input [1:0]  a;
    input [12:0] len;
    dword_span = {11'd0, a} + len + 13'd3;
endfunction

// PG213's 512-bit RQ tuser [36:0] of one beat: discontinue, is_eop_ptr 1/0, is_eop, is_sop_ptr
// 1/0, is_sop, addr_offset (0), and {last_be, first_be} of the second and first TLP starting in
// the beat (be1, be0 = {last_be, first_be}).
function [36:0] rq_user;
    input       disc;
    input [3:0] eop_ptr1, eop_ptr0;
    input [1:0] eop;
    input [1:0] sop_ptr1, sop_ptr0;
    input [1:0] sop;
    input [7:0] be1, be0;
    rq_user = {disc, eop_ptr1, eop_ptr0, eop, sop_ptr1, sop_ptr0, sop, 4'd0,
               be1[7:4], be0[7:4], be1[3:0], be0[3:0]};
endfunction

// Index of the lowest set bit (0 when none is set).
function [3:0] lowest16;
    input [15:0] v;
    integer i;
    begin
        lowest16 = 4'd0;
        for (i = 15; i >= 0; i = i - 1)
            if (v[i]) lowest16 = i[3:0];
    end
endfunction

function [1:0] lowest4;
    input [3:0] v;
    lowest4 = v[0] ? 2'd0 : v[1] ? 2'd1 : v[2] ? 2'd2 : v[3] ? 2'd3 : 2'd0;
endfunction

// Index of the highest set bit (0 when none is set).
function [3:0] highest16;
    input [15:0] v;
    integer i;
    begin
        highest16 = 4'd0;
        for (i = 0; i < 16; i = i + 1)
            if (v[i]) highest16 = i[3:0];
    end
endfunction

// ---------------------------------------------------------------------------------------------
// RQ: output register
reg [DATA_WIDTH-1:0] q_data;
reg [DW-1:0]         q_keep;
reg                  q_last, q_valid, q_disc;
reg [7:0]            q_be;
wire q_take;                    // the beat in q is taken (by the hard IP, or by the packer)
wire q_load = !q_valid || q_take;

// write TLP in progress
reg         w_busy;             // descriptor sent or pending, payload beats to go
reg         w_desc;             // descriptor not yet sent
reg [63:0]  w_addr;
reg [12:0]  w_len;
reg [3:0]   w_o;                // DWORD offset of the first byte in its line
reg [8:0]   w_beats_left;       // output beats still to send (the descriptor's beat included)
reg [8:0]   w_lines_left;       // engine lines still to take
reg [DATA_WIDTH-1:0] w_prev;    // the last engine line taken
reg         w_disc;
reg         w_cpl;
reg         last_was_write;     // arbitration: reads and writes alternate when both wait
reg         wn_valid;           // the next write request, taken from the engine
reg [63:0]  wn_addr;
reg [12:0]  wn_len;
reg [8:0]   w_total_lines;

// The output beat b of a write TLP is the 16 DWORDs at offset t = (o - 4) mod 16 of
// {line c, line c-1}, c = b + (o >= 4): the descriptor takes DWORDs 0..3 of beat 0.
wire [3:0]  w_t = w_o - 4'd4;
wire        w_ahead = w_o >= 4'd4;
// a beat needs the next engine line unless the lines have run out (then it is flushed)
wire        w_need_line = w_lines_left != 9'd0;
wire        w_line_ok = !w_need_line || wr_dat_valid;
wire [2*DATA_WIDTH-1:0] w_win = {w_need_line ? wr_dat_data : {DATA_WIDTH{1'b0}}, w_prev};
wire [DATA_WIDTH-1:0] w_shifted = w_win[{1'b0, w_t, 5'd0} +: DATA_WIDTH];
wire        w_first = w_desc;
wire        w_empty_strb = w_need_line && wr_dat_strb == {DATA_WIDTH/8{1'b0}};
// the first beat with o >= 4 only primes the window: it takes a line and sends nothing
wire        w_prime = w_desc && w_ahead && w_lines_left == w_total_lines;

wire [7:0]  w_be = byte_enables(w_addr[1:0], w_len);
wire [12:0] w_span = dword_span(w_addr[1:0], w_len);
wire [10:0] w_dwords = w_span[12:2];
// DWORDs in the last beat of the write TLP (0: a full beat)
wire [13:0] w_dw_all = {3'd0, w_dwords} + 14'd4;
wire [3:0]  w_rem = w_dw_all[3:0];
wire [127:0] w_descriptor = {1'b0, 3'd0, 3'd0, 1'b0, 16'd0, 8'd0,        // DW3: tag 0
                             16'd0, 1'b0, REQ_MEM_WRITE, w_dwords,         // DW2
                             w_addr[63:2], 2'b00};                         // DW1, DW0

// MSI-X message as a write TLP of one DWORD
wire [127:0] m_descriptor = {32'd0, 16'd0, 1'b0, REQ_MEM_WRITE, 11'd1, msix_addr[63:2], 2'b00};

// Completion buffer budget of the next read (see the module comment): headers = the RCB blocks
// it touches, data = its 16-byte blocks + one per header; reserved (b_used_*) until released.
localparam integer RCB_BITS = (BUDGET_RCB == 128) ? 7 : 6;
wire [13:0] rd_end_off = {8'd0, rd_req_addr[5:0]} + {1'b0, rd_req_len} - 14'd1;
wire [13:0] rd_blk_span = {7'd0, rd_req_addr[RCB_BITS-1:0]} + {1'b0, rd_req_len} - 14'd1;
wire [13:0] rd_grp_span = {10'd0, rd_req_addr[3:0]} + {1'b0, rd_req_len} - 14'd1;
wire [6:0]  rd_lines = rd_end_off[12:6] + 7'd1;           // card lines (the adapter's beats)
wire [6:0]  rd_hdrs = rd_blk_span[12:RCB_BITS] + 7'd1;
wire [9:0]  rd_grps = {1'b0, rd_grp_span[12:4]} + 10'd1;
wire [9:0]  rd_data = rd_grps + {3'd0, rd_hdrs};
reg  [8:0]  b_used_h;                                     // headers reserved
reg  [11:0] b_used_d;                                     // data credits reserved
localparam [31:0] CPLH_LIMIT = CPLH;
localparam [31:0] CPLD_LIMIT = CPLD;
wire        rd_fits = {1'b0, b_used_h} + {3'd0, rd_hdrs} <= CPLH_LIMIT[9:0]
               && {1'b0, b_used_d} + {3'd0, rd_data} <= CPLD_LIMIT[12:0];

// Next TLP to start when the output register is free and no write is in progress.
wire idle = !w_busy;
wire pick_msix = idle && msix_valid;
wire want_rd = idle && !msix_valid && rd_req_valid && rd_fits;
wire want_wr = idle && !msix_valid && wn_valid;
wire pick_rd = want_rd && (!want_wr || last_was_write);
wire pick_wr = want_wr && !pick_rd;
wire start_wr = pick_wr && q_load;

assign msix_ready = pick_msix && q_load;
assign rd_req_ready = pick_rd && q_load;
// a write request waits in wn_* until its TLP starts: the engine streams its lines right after
// the current TLP's (it hands a request's lines on only once the request is taken)
assign wr_req_ready = !wn_valid;

wire [7:0]  r_be = byte_enables(rd_req_addr[1:0], rd_req_len);
wire [12:0] r_span = dword_span(rd_req_addr[1:0], rd_req_len);
wire [10:0] r_dwords = r_span[12:2];
wire [127:0] r_descriptor = {8'd0, 16'd0, 2'd0, rd_req_tag,                  // DW3: tag
                             16'd0, 1'b0, REQ_MEM_READ, r_dwords,            // DW2
                             rd_req_addr[63:2], 2'b00};

// write data: a line is taken when a beat that needs it goes out (or primes the window)
wire w_step = w_busy && q_load && w_line_ok;
assign wr_dat_ready = w_step && w_need_line;
wire w_send = w_step && !w_prime;
wire w_last_beat = w_send && w_beats_left == 9'd1;

assign wr_cpl_valid = w_cpl;
assign wr_cpl_err = 1'b0;      // writes are posted: a bad host address is the root's to report

wire [12:0] wr_last_byte_line = {7'd0, wn_addr[5:0]} + wn_len - 13'd1;
wire [8:0]  wr_lines = {2'd0, wr_last_byte_line[12:6]} + 9'd1;
wire [12:0] wr_span = dword_span(wn_addr[1:0], wn_len);
wire [12:0] wr_dw_total = {2'd0, wr_span[12:2]} + 13'd4 + 13'd15;    // /16: output beats

always @(posedge clk) begin
    w_cpl <= 1'b0;
    if (q_load) q_valid <= 1'b0;
    if (msix_ready) begin
        q_valid <= 1'b1;
        q_data <= {{DATA_WIDTH-160{1'b0}}, msix_data, m_descriptor};
        q_keep <= 16'h001F;
        q_last <= 1'b1;
        q_be <= 8'h0F;
        q_disc <= 1'b0;
    end
    if (rd_req_ready) begin
        q_valid <= 1'b1;
        q_data <= {{DATA_WIDTH-128{1'b0}}, r_descriptor};
        q_keep <= 16'h000F;
        q_last <= 1'b1;
        q_be <= r_be;
        q_disc <= 1'b0;
        last_was_write <= 1'b0;
    end
    if (wr_req_valid && wr_req_ready) begin
        wn_valid <= 1'b1;
        wn_addr <= wr_req_addr;
        wn_len <= wr_req_len;
    end
    if (start_wr) begin
        wn_valid <= 1'b0;
        w_busy <= 1'b1;
        w_desc <= 1'b1;
        w_addr <= wn_addr;
        w_len <= wn_len;
        w_o <= wn_addr[5:2];
        w_lines_left <= wr_lines;
        w_total_lines <= wr_lines;
        w_beats_left <= wr_dw_total[12:4];
        w_disc <= 1'b0;
        last_was_write <= 1'b1;
    end
    if (w_step) begin
        if (w_need_line) begin
            w_prev <= wr_dat_data;
            w_lines_left <= w_lines_left - 9'd1;
        end
        if (w_send) begin
            w_desc <= 1'b0;
            w_beats_left <= w_beats_left - 9'd1;
            q_valid <= 1'b1;
            q_data <= w_first ? {w_shifted[DATA_WIDTH-1:128], w_descriptor} : w_shifted;
            q_keep <= (w_beats_left == 9'd1 && w_rem != 4'd0) ? ~(16'hFFFF << w_rem) : 16'hFFFF;
            q_last <= w_beats_left == 9'd1;
            q_be <= w_be;
            q_disc <= w_disc || w_empty_strb;
            if (w_empty_strb) w_disc <= 1'b1;
            if (w_last_beat) begin
                w_busy <= 1'b0;
                w_cpl <= 1'b1;
            end
        end else if (w_empty_strb) begin
            w_disc <= 1'b1;
        end
    end
    if (rst) begin
        q_valid <= 1'b0;
        w_busy <= 1'b0;
        w_desc <= 1'b0;
        w_cpl <= 1'b0;
        wn_valid <= 1'b0;
        last_was_write <= 1'b0;
    end
end

// ---------------------------------------------------------------------------------------------
// RQ to the hard IP. Without straddling the beats above go out as they are (one TLP per run of
// beats). With it (PG213's 512-bit RQ straddle) they are repacked in 256-bit halves: a TLP that
// ends in DWORDs 0..7 of a beat is held (the carry, k_*) and the next TLP's first half goes into
// DWORDs 8..15 of that beat, the rest of that TLP one half later (a beat = its half j and the
// carried half j - 1), until a TLP ends in a low half again. A TLP's halves always go out in
// consecutive halves of the stream; a carried end goes out alone when nothing follows it at
// once. A beat with discontinue carries only the abandoned TLP (the hard IP applies the bit to
// every TLP of the beat): an abandoned TLP's end or start never shares a beat.
generate
if (STRADDLE != 0) begin : g_rq_straddle
    reg         x_first;                 // the beat in q starts a TLP
    wire [3:0]  x_last_dw = highest16(q_keep);
    wire        x_end_lo = q_last && !q_keep[8];     // its TLP ends in DWORDs 0..7
    wire [3:0]  x_eop_hi = {1'b1, x_last_dw[2:0]};  // that end, one half later
    reg         k_valid, k_eop, k_sop, k_disc;
    reg [255:0] k_data;
    reg [2:0]   k_ptr;                   // the carried end's last DWORD
    reg [7:0]   k_be;                    // {last_be, first_be} of a TLP starting in the carry
    wire [7:0]  k_keep = ~(8'hFE << k_ptr);
    reg         o_valid;
    reg [DATA_WIDTH-1:0] o_data;
    reg [15:0]  o_keep;
    reg [36:0]  o_user;
    wire        o_free = !o_valid || m_axis_rq_tready;
    // no carry: a TLP ending in its low half is carried (needs no free output), else sent as is
    wire        a_carry = !k_valid && q_valid && x_end_lo && !q_disc;
    wire        a_pass = !k_valid && q_valid && !a_carry && o_free;
    // a carried middle half: the TLP's next beat completes the output beat
    wire        b_step = k_valid && !k_eop && q_valid && o_free;
    // a carried end: with the next TLP's first half (neither abandoned), or alone when that
    // cannot be or nothing has come for K_HOLD cycles (a write's first beat follows its
    // predecessor's last after a cycle or two: the start, the window's priming)
    localparam [1:0] K_HOLD = 2'd3;
    reg  [1:0]  k_wait;
    wire        c_merge = k_valid && k_eop && q_valid && !q_disc && !k_disc && o_free;
    wire        c_alone = k_valid && k_eop && !c_merge && o_free
                          && (q_valid || k_disc || k_wait == K_HOLD);
    assign q_take = a_carry || a_pass || b_step || c_merge;
    always @(posedge clk) begin
        if (o_free) o_valid <= 1'b0;
        if (q_take) x_first <= q_last;
        if (k_valid && k_eop && !q_valid && k_wait != K_HOLD) k_wait <= k_wait + 2'd1;
        if (q_take) k_wait <= 2'd0;
        if (a_carry) begin
            k_valid <= 1'b1;
            k_eop <= 1'b1;
            k_sop <= x_first;
            k_disc <= 1'b0;
            k_data <= q_data[255:0];
            k_ptr <= x_last_dw[2:0];
            k_be <= q_be;
        end
        if (a_pass) begin
            o_valid <= 1'b1;
            o_data <= q_data;
            o_keep <= q_keep;
            o_user <= rq_user(q_disc, 4'd0, x_last_dw, {1'b0, q_last}, 2'd0, 2'd0,
                              {1'b0, x_first}, 8'd0, q_be);
        end
        if (b_step || c_merge) begin
            o_valid <= 1'b1;
            o_data <= {q_data[255:0], k_data};
            o_keep <= {q_keep[7:0], b_step ? 8'hFF : k_keep};
            // the carry goes on with q's high half (a middle, or the TLP's end), or is empty
            k_valid <= q_keep[8];
            k_eop <= q_last;
            k_sop <= 1'b0;
            k_disc <= q_disc;
            k_data <= q_data[511:256];
            k_ptr <= x_last_dw[2:0];
        end
        if (b_step) begin
            o_user <= rq_user(q_disc || k_disc, 4'd0, x_eop_hi, {1'b0, x_end_lo}, 2'd0, 2'd0,
                              2'b00, 8'd0, 8'd0);
        end
        if (c_merge) begin
            // the TLPs of the beat in order: the carried end's (its start too when k_sop), q's
            o_user <= k_sop ? rq_user(1'b0, x_eop_hi, {1'b0, k_ptr}, {x_end_lo, 1'b1}, 2'd2,
                                      2'd0, 2'b11, q_be, k_be)
                            : rq_user(1'b0, x_eop_hi, {1'b0, k_ptr}, {x_end_lo, 1'b1}, 2'd0,
                                      2'd2, 2'b01, 8'd0, q_be);
        end
        if (c_alone) begin
            o_valid <= 1'b1;
            o_data <= {256'd0, k_data};
            o_keep <= {8'h00, k_keep};
            o_user <= rq_user(k_disc, 4'd0, {1'b0, k_ptr}, 2'b01, 2'd0, 2'd0, {1'b0, k_sop},
                              8'd0, k_be);
            k_valid <= 1'b0;
        end
        if (rst) begin
            x_first <= 1'b1;
            k_valid <= 1'b0;
            o_valid <= 1'b0;
        end
    end
    assign m_axis_rq_tdata = o_data;
    assign m_axis_rq_tkeep = o_keep;
    assign m_axis_rq_tlast = o_user[26] || o_user[27];
    assign m_axis_rq_tuser = o_user;
    assign m_axis_rq_tvalid = o_valid;
end else begin : g_rq_plain
    assign q_take = m_axis_rq_tready;
    assign m_axis_rq_tdata = q_data;
    assign m_axis_rq_tkeep = q_keep;
    assign m_axis_rq_tlast = q_last;
    assign m_axis_rq_tuser = {q_disc, 24'd0, q_be[7:4], 4'd0, q_be[3:0]};
    assign m_axis_rq_tvalid = q_valid;
end
endgenerate

// ---------------------------------------------------------------------------------------------
// RC from the hard IP: the stream below (rc_*) has one TLP per run of beats, each from DWORD 0,
// its end marked by last. Without straddling it is the hard IP's stream. With it (PG213's
// 512-bit RC straddle: a TLP may start at DWORD 0, 4, 8 or 12, so up to four per beat, or 0 and
// 8 in the two-TLP mode; is_sop / is_eop with their pointers in tuser), each TLP is shifted down
// to DWORD 0: a TLP starting at segment p (4 x p DWORDs) of beat n becomes the beats j of
// {beat n + j + 1, beat n + j} from DWORD 4 x p (R holds beat n + j, the stream's head is n + j + 1)
// until its end, in R at or after DWORD 4 x p (R alone), or in the head below it. The card clock
// (400 MHz) carries the unstraddled beats faster than the user clock (250 MHz) the straddled
// ones: a 256-byte completion is 5 beats here, 4.25 on the link side.
wire [DATA_WIDTH-1:0] rc_data;
wire                  rc_last, rc_valid, rc_ready;
generate
if (STRADDLE != 0) begin : g_rc_straddle
    wire [31:0] se = s_axis_rc_sop_eop;
    // the head beat: segments where TLPs start, DWORDs where they end
    wire [3:0]  i_sop = ({3'd0, se[0]} << se[5:4]) | ({3'd0, se[1]} << se[7:6])
                      | ({3'd0, se[2]} << se[9:8]) | ({3'd0, se[3]} << se[11:10]);
    wire [15:0] i_eop = ({15'd0, se[12]} << se[19:16]) | ({15'd0, se[13]} << se[23:20])
                      | ({15'd0, se[14]} << se[27:24]) | ({15'd0, se[15]} << se[31:28]);
    reg         r_valid;
    reg [DATA_WIDTH-1:0] r_data;
    reg [3:0]   r_sop;
    reg [15:0]  r_eop;
    reg [1:0]   r_p;                     // the current TLP's first segment
    reg         o_valid, o_last;
    reg [DATA_WIDTH-1:0] o_data;
    wire        o_free = !o_valid || rc_ready;
    // the TLP ends in R (its first end at or after DWORD 4p); a TLP starts after that end
    wire [15:0] r_end_m = r_eop & (16'hFFFF << {r_p, 2'b00});
    wire        r_end = r_end_m != 16'd0;
    wire [3:0]  r_e = lowest16(r_end_m);
    wire [3:0]  r_next_m = r_sop & (4'b1110 << r_e[3:2]);
    // or in the head, below DWORD 4p (the head's first end is the TLP's: it goes on from 0)
    wire [3:0]  i_e = lowest16(i_eop);
    wire        i_end_low = i_eop != 16'd0 && i_e < {r_p, 2'b00};
    wire [3:0]  i_next_m = i_sop & (4'b1110 << i_e[3:2]);
    wire [2*DATA_WIDTH-1:0] win = {s_axis_rc_tdata, r_data};
    // a beat out: the TLP's last from R alone, or from R and the head (which is taken)
    wire        emit_r = r_valid && o_free && r_end;
    wire        emit_i = r_valid && o_free && !r_end && s_axis_rc_tvalid;
    // the head becomes R with a new TLP at its first start: R is empty or was used up now
    wire        load = s_axis_rc_tvalid && (!r_valid || emit_r && r_next_m == 4'd0);
    assign s_axis_rc_tready = emit_i || load;
    always @(posedge clk) begin
        if (o_free) o_valid <= 1'b0;
        if (emit_r || emit_i) begin
            o_valid <= 1'b1;
            o_data <= win[{1'b0, r_p, 7'd0} +: DATA_WIDTH];
            o_last <= emit_r || i_end_low;
        end
        if (emit_r && r_next_m != 4'd0) r_p <= lowest4(r_next_m);
        if (emit_r && r_next_m == 4'd0 && !s_axis_rc_tvalid) r_valid <= 1'b0;
        if (emit_i) begin
            r_data <= s_axis_rc_tdata;
            r_sop <= i_sop;
            r_eop <= i_eop;
            if (i_end_low) begin
                r_valid <= i_next_m != 4'd0;
                r_p <= lowest4(i_next_m);
            end
        end
        if (load) begin
            r_valid <= 1'b1;
            r_data <= s_axis_rc_tdata;
            r_sop <= i_sop;
            r_eop <= i_eop;
            r_p <= lowest4(i_sop);
        end
        if (rst) begin
            r_valid <= 1'b0;
            o_valid <= 1'b0;
        end
    end
    assign rc_data = o_data;
    assign rc_last = o_last;
    assign rc_valid = o_valid;
    wire unused_rc = &{1'b0, r_e[1:0]};      // an end's segment is what matters
end else begin : g_rc_plain
    assign rc_data = s_axis_rc_tdata;
    assign rc_last = s_axis_rc_tlast;
    assign rc_valid = s_axis_rc_tvalid;
    assign s_axis_rc_tready = rc_ready;
end
endgenerate

// ---------------------------------------------------------------------------------------------
// RC: completions realigned to lines. Line i of a completion is the 16 DWORDs at offset
// s = (3 - o) mod 16 of {beat i + d, beat i + d - 1} (o: DWORD offset of its first byte in the
// line, d = (o <= 3)); a line whose beat lies past the TLP's end is sent in one flush cycle.
reg         c_active;           // inside a completion TLP (its first beat has been taken)
reg         c_flush;            // the TLP has ended, one line still to send
reg [5:0]   c_tag;
reg [3:0]   c_s;
reg         c_d;
reg [6:0]   c_lines_left;
reg         c_done;             // this completion completes the request
reg         c_err;
reg         c_single;           // an error completion: one error beat
reg [DATA_WIDTH-1:0] c_prev;

// per tag: the next line expected (index in the 4 KiB page), the line after the request's last,
// a completion was missing, and what is left of its buffer reservation
reg  [6:0]  t_next [0:63];
reg  [6:0]  t_end [0:63];
reg         t_fail [0:63];
reg  [6:0]  t_hdrs [0:63];
reg  [9:0]  t_data [0:63];
// the buffer credits released when the current completion's last beat is taken
reg  [6:0]  c_rel_h;
reg  [9:0]  c_rel_d;

wire [DATA_WIDTH-1:0] rc = rc_data;
wire [11:0] h_lower = rc[11:0];
wire [3:0]  h_err_code = rc[15:12];
wire        h_completed = rc[30];
wire [10:0] h_dwords = rc[42:32];
wire [2:0]  h_status = rc[45:43];
wire        h_poisoned = rc[46];
wire [7:0]  h_tag = rc[71:64];
wire [3:0]  h_o = h_lower[5:2];
wire        h_d = h_o <= 4'd3;
wire [11:0] h_span = {8'd0, h_o} + {1'b0, h_dwords} + 12'd15;
wire [6:0]  h_lines = h_span[10:4];
// a poisoned completion carries its data (every line flagged); any other error is one beat
wire        h_poison = h_poisoned || h_err_code == ERR_POISONED;
wire        h_drop = h_err_code == ERR_INVALID_TAG;
wire [5:0]  h_t = h_tag[5:0];
wire        h_status_bad = (h_err_code != 4'd0 && h_err_code != ERR_POISONED) || h_status != 3'd0;
// the lines of a good completion: does it start where the last one ended, does the request end
// where it should when it completes
wire [6:0]  h_line0 = {1'b0, h_lower[11:6]};
wire [6:0]  h_next = h_line0 + h_lines;
wire        h_gap = !h_drop && !h_status_bad && (t_fail[h_t] || h_line0 != t_next[h_t]);
wire        h_short = !h_drop && !h_status_bad && h_completed && h_next != t_end[h_t];
wire        h_final = !h_drop && (h_completed || h_status_bad);
// error beats now (the lines not delivered, the last with last); or nothing sent (a gap
// before the request's end)
wire        h_bad = h_final && (h_status_bad || h_gap || h_short);
wire        h_skip = h_drop || (h_gap && !h_final);
wire [6:0]  h_undelivered = t_end[h_t] - t_next[h_t];
wire [6:0]  h_err_lines = (t_end[h_t] > t_next[h_t]) ? h_undelivered : 7'd1;
// the buffer credits this completion frees (its header, its data + 1; all that is left of the
// reservation when it completes the request)
wire [9:0]  h_dcred = {1'b0, h_dwords[10:2]} + {9'd0, h_dwords[1:0] != 2'd0} + 10'd1;
wire [6:0]  h_rel_h = h_drop ? 7'd0 : (h_final || t_hdrs[h_t] == 7'd0) ? t_hdrs[h_t] : 7'd1;
wire [9:0]  h_rel_d = h_drop ? 10'd0
                    : (h_final || t_data[h_t] < h_dcred) ? t_data[h_t] : h_dcred;

// the error beats after the first of a request that ended in error (the input waits)
reg         c_eburst;
reg  [6:0]  c_elines;
wire        c_stall = c_flush || c_eburst;
// beat 0 of a TLP
wire        sop = rc_valid && !c_active && !c_stall;
// the line emitted this cycle, from the current beat (or the flush)
wire        emit_mid = c_active && rc_valid && !c_stall && c_lines_left != 7'd0;
wire        emit_flush = c_flush;
wire [2*DATA_WIDTH-1:0] c_win = {c_flush ? {DATA_WIDTH{1'b0}} : rc, c_prev};
wire [3:0]  s_now = sop ? 4'd3 - h_o : c_s;
wire [DATA_WIDTH-1:0] c_line = c_win[{1'b0, s_now, 5'd0} +: DATA_WIDTH];

assign rc_ready = !c_stall;
reg                  o_valid, o_last, o_err;
reg [5:0]            o_tag;
reg [DATA_WIDTH-1:0] o_data;
assign rd_cpl_valid = o_valid;
assign rd_cpl_tag = o_tag;
assign rd_cpl_data = o_data;
assign rd_cpl_last = o_last;
assign rd_cpl_err = o_err;

always @(posedge clk) begin
    o_valid <= 1'b0;
    if (rc_valid && rc_ready) c_prev <= rc;
    if (sop) begin
        c_tag <= h_tag[5:0];
        c_s <= 4'd3 - h_o;
        c_d <= h_d;
        c_done <= h_completed;
        c_err <= h_poison;
        c_single <= h_bad;
        if (h_skip) begin
            c_lines_left <= 7'd0;
        end else if (h_bad) begin
            // the first error beat now, the others from c_elines
            o_valid <= 1'b1;
            o_tag <= h_tag[5:0];
            o_data <= {DATA_WIDTH{1'b0}};
            o_last <= h_err_lines == 7'd1;
            o_err <= 1'b1;
            c_lines_left <= 7'd0;
            c_eburst <= h_err_lines != 7'd1;
            c_elines <= h_err_lines - 7'd1;
        end else if (!h_d) begin
            o_valid <= 1'b1;
            o_tag <= h_tag[5:0];
            o_data <= c_line;
            o_last <= h_completed && h_lines == 7'd1;
            o_err <= h_poison;
            c_lines_left <= h_lines - 7'd1;
        end else begin
            c_lines_left <= h_lines;
        end
        if (!rc_last) begin
            c_active <= 1'b1;
        end else if (!h_skip && !h_bad && (h_d ? h_lines != 7'd0 : h_lines > 7'd1)) begin
            c_flush <= 1'b1;
        end
    end
    if (emit_mid || emit_flush) begin
        o_valid <= 1'b1;
        o_tag <= c_tag;
        o_data <= c_line;
        o_last <= c_done && c_lines_left == 7'd1;
        o_err <= c_err;
        c_lines_left <= c_lines_left - 7'd1;
    end
    if (c_eburst) begin
        o_valid <= 1'b1;
        o_tag <= c_tag;
        o_data <= {DATA_WIDTH{1'b0}};
        o_last <= c_elines == 7'd1;
        o_err <= 1'b1;
        c_elines <= c_elines - 7'd1;
        if (c_elines == 7'd1) c_eburst <= 1'b0;
    end
    if (c_active && rc_valid && rc_ready && rc_last) begin
        c_active <= 1'b0;
        // one more line than beats left: it is sent from the last beat alone
        if (c_lines_left > 7'd1 || (c_lines_left == 7'd1 && !emit_mid))
            c_flush <= 1'b1;
    end
    if (emit_flush) c_flush <= 1'b0;
    if (rst) begin
        c_active <= 1'b0;
        c_flush <= 1'b0;
        c_eburst <= 1'b0;
        o_valid <= 1'b0;
    end
end

// Buffer budget and per-tag bookkeeping. A read is issued only when no completion of its tag
// is still expected (the engine reuses a tag after its last line), so the two never meet.
wire        c_end = rc_valid && rc_ready && rc_last;
wire        rel_now = c_end && sop;                       // a one-beat completion
wire        rel_later = c_end && c_active;
wire [6:0]  rel_h = rel_now ? h_rel_h : rel_later ? c_rel_h : 7'd0;
wire [9:0]  rel_d = rel_now ? h_rel_d : rel_later ? c_rel_d : 10'd0;
wire [8:0]  add_h = rd_req_ready ? {2'd0, rd_hdrs} : 9'd0;
wire [11:0] add_d = rd_req_ready ? {2'd0, rd_data} : 12'd0;
always @(posedge clk) begin
    b_used_h <= b_used_h + add_h - {2'd0, rel_h};
    b_used_d <= b_used_d + add_d - {2'd0, rel_d};
    if (sop) begin
        c_rel_h <= h_rel_h;
        c_rel_d <= h_rel_d;
        if (!h_drop) begin
            if (!h_gap) t_next[h_t] <= h_next;       // the next line to deliver
            t_fail[h_t] <= h_gap;
            t_hdrs[h_t] <= t_hdrs[h_t] - h_rel_h;
            t_data[h_t] <= t_data[h_t] - h_rel_d;
        end
    end
    if (rd_req_ready) begin
        t_next[rd_req_tag] <= {1'b0, rd_req_addr[11:6]};
        t_end[rd_req_tag] <= {1'b0, rd_req_addr[11:6]} + rd_lines;
        t_fail[rd_req_tag] <= 1'b0;
        t_hdrs[rd_req_tag] <= rd_hdrs;
        t_data[rd_req_tag] <= rd_data;
    end
    if (rst) begin
        b_used_h <= 9'd0;
        b_used_d <= 12'd0;
    end
end

// the engine always takes completions (its ring space is reserved per request); the dropped
// bits: requester/completer IDs, byte count, attributes, the write request's upper address bits
// (the descriptor uses them all), the status of c_single (its beat went out at once)
wire unused_ok = &{1'b0, rd_cpl_ready, s_axis_rc_tlast, s_axis_rc_sop_eop, msix_addr[1:0], w_span[1:0], r_span[1:0], wr_span[1:0],
                   wr_dw_total[3:0], h_lower[1:0], h_span[11], h_span[3:0], w_dw_all[13:4], wr_last_byte_line[5:0], rc[DATA_WIDTH-1:72], rc[63:47], rc[31], rc[29:16],
                   h_tag[7:6], c_d, c_single, wr_dat_last, w_total_lines,
                   rd_end_off[13], rd_end_off[5:0], rd_blk_span[13], rd_blk_span[RCB_BITS-1:0],
                   rd_grp_span[13], rd_grp_span[3:0]};

endmodule

`resetall
