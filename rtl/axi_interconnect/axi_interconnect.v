`resetall
`timescale 1ns / 1ps
`default_nettype none

// AXI4 interconnect: S_COUNT masters (on the s_axi_* ports) share one AXI4 slave (m_axi_*).
//
// AR and AW are arbitrated separately, round robin: the search for the next grant starts after
// the master granted last, so a master holding VALID waits at most S_COUNT-1 grants to others.
// A grant loads a registered output stage that may take a new request in the cycle it is emptied,
// so each address channel carries one request per cycle while the slave accepts them, and
// m_axi_arvalid/awvalid and their payloads stay stable while the slave holds READY low.
//
// IDs are widened on the way out: m_axi_*id = {master index, master's ID}. R and B beats are sent
// back to the master named by the top bits of their ID with those bits removed; a response whose
// index names no master (only a slave that invents IDs could produce one) is drained.
//
// Write data is not interleaved: every AW grant pushes the master's index into a FIFO and the
// FIFO head selects whose W beats pass to the slave, up to WLAST; AW grants stop while it is
// full. W, R and B are combinational muxes, stable because AXI requires the source to hold them.
// The slave must not depend on W before AW (AXI allows it not to), since a master's W beats
// wait for its AW grant. Lock, cache, prot, qos and user signals are not carried.
module axi_interconnect #(
    parameter integer S_COUNT = 2,                               // masters (s_axi ports), >= 1
    parameter integer DATA_WIDTH = 512,                          // data width of every port
    parameter integer ADDR_WIDTH = 32,                           // address width of every port
    parameter integer S_ID_WIDTH = 8,                            // ID width of the master ports
    parameter integer M_ID_WIDTH = S_ID_WIDTH + $clog2(S_COUNT), // slave ID width: {index, ID}
    parameter integer W_FIFO_DEPTH = 8                           // AW grants whose W is pending
) (
    input  wire                             clk,
    input  wire                             rst,

    // AXI4 slave ports, one per master, flattened (master i in bits [i*W +: W])
    input  wire [S_COUNT*S_ID_WIDTH-1:0]    s_axi_awid,
    input  wire [S_COUNT*ADDR_WIDTH-1:0]    s_axi_awaddr,
    input  wire [S_COUNT*8-1:0]             s_axi_awlen,
    input  wire [S_COUNT*3-1:0]             s_axi_awsize,
    input  wire [S_COUNT*2-1:0]             s_axi_awburst,
    input  wire [S_COUNT-1:0]               s_axi_awvalid,
    output wire [S_COUNT-1:0]               s_axi_awready,
    input  wire [S_COUNT*DATA_WIDTH-1:0]    s_axi_wdata,
    input  wire [S_COUNT*DATA_WIDTH/8-1:0]  s_axi_wstrb,
    input  wire [S_COUNT-1:0]               s_axi_wlast,
    input  wire [S_COUNT-1:0]               s_axi_wvalid,
    output wire [S_COUNT-1:0]               s_axi_wready,
    output wire [S_COUNT*S_ID_WIDTH-1:0]    s_axi_bid,
    output wire [S_COUNT*2-1:0]             s_axi_bresp,
    output wire [S_COUNT-1:0]               s_axi_bvalid,
    input  wire [S_COUNT-1:0]               s_axi_bready,
    input  wire [S_COUNT*S_ID_WIDTH-1:0]    s_axi_arid,
    input  wire [S_COUNT*ADDR_WIDTH-1:0]    s_axi_araddr,
    input  wire [S_COUNT*8-1:0]             s_axi_arlen,
    input  wire [S_COUNT*3-1:0]             s_axi_arsize,
    input  wire [S_COUNT*2-1:0]             s_axi_arburst,
    input  wire [S_COUNT-1:0]               s_axi_arvalid,
    output wire [S_COUNT-1:0]               s_axi_arready,
    output wire [S_COUNT*S_ID_WIDTH-1:0]    s_axi_rid,
    output wire [S_COUNT*DATA_WIDTH-1:0]    s_axi_rdata,
    output wire [S_COUNT*2-1:0]             s_axi_rresp,
    output wire [S_COUNT-1:0]               s_axi_rlast,
    output wire [S_COUNT-1:0]               s_axi_rvalid,
    input  wire [S_COUNT-1:0]               s_axi_rready,

    // AXI4 master port to the shared slave
    output wire [M_ID_WIDTH-1:0]            m_axi_awid,
    output wire [ADDR_WIDTH-1:0]            m_axi_awaddr,
    output wire [7:0]                       m_axi_awlen,
    output wire [2:0]                       m_axi_awsize,
    output wire [1:0]                       m_axi_awburst,
    output wire                             m_axi_awvalid,
    input  wire                             m_axi_awready,
    output wire [DATA_WIDTH-1:0]            m_axi_wdata,
    output wire [DATA_WIDTH/8-1:0]          m_axi_wstrb,
    output wire                             m_axi_wlast,
    output wire                             m_axi_wvalid,
    input  wire                             m_axi_wready,
    input  wire [M_ID_WIDTH-1:0]            m_axi_bid,
    input  wire [1:0]                       m_axi_bresp,
    input  wire                             m_axi_bvalid,
    output wire                             m_axi_bready,
    output wire [M_ID_WIDTH-1:0]            m_axi_arid,
    output wire [ADDR_WIDTH-1:0]            m_axi_araddr,
    output wire [7:0]                       m_axi_arlen,
    output wire [2:0]                       m_axi_arsize,
    output wire [1:0]                       m_axi_arburst,
    output wire                             m_axi_arvalid,
    input  wire                             m_axi_arready,
    input  wire [M_ID_WIDTH-1:0]            m_axi_rid,
    input  wire [DATA_WIDTH-1:0]            m_axi_rdata,
    input  wire [1:0]                       m_axi_rresp,
    input  wire                             m_axi_rlast,
    input  wire                             m_axi_rvalid,
    output wire                             m_axi_rready
);

// ---------------------------------------------------------------------------------------------
// Parameters
localparam integer SEL_WIDTH = $clog2(S_COUNT);                // index bits added to the ID
localparam integer IDX_WIDTH = S_COUNT > 1 ? SEL_WIDTH : 1;    // width of an index signal
localparam integer STRB_WIDTH = DATA_WIDTH / 8;
localparam integer FIFO_PTR_WIDTH = W_FIFO_DEPTH > 1 ? $clog2(W_FIFO_DEPTH) : 1;
localparam integer FIFO_CNT_WIDTH = W_FIFO_DEPTH > 0 ? $clog2(W_FIFO_DEPTH + 1) : 1;
localparam integer LAST_IDX_INT = S_COUNT - 1;
localparam integer FIFO_LAST_INT = W_FIFO_DEPTH - 1;
localparam integer FIFO_FULL_INT = W_FIFO_DEPTH;
localparam [IDX_WIDTH-1:0] LAST_IDX = LAST_IDX_INT[IDX_WIDTH-1:0];          // highest index
localparam [FIFO_PTR_WIDTH-1:0] FIFO_LAST = FIFO_LAST_INT[FIFO_PTR_WIDTH-1:0];
localparam [FIFO_CNT_WIDTH-1:0] FIFO_FULL = FIFO_FULL_INT[FIFO_CNT_WIDTH-1:0];

initial begin
    if (S_COUNT < 1)
        $fatal(1, "axi_interconnect: S_COUNT must be at least 1 (got %0d)", S_COUNT);
    if (S_ID_WIDTH < 1)
        $fatal(1, "axi_interconnect: S_ID_WIDTH must be at least 1 (got %0d)", S_ID_WIDTH);
    if (M_ID_WIDTH != S_ID_WIDTH + SEL_WIDTH)
        $fatal(1, "axi_interconnect: M_ID_WIDTH is %0d, expected S_ID_WIDTH+$clog2(S_COUNT) = %0d",
               M_ID_WIDTH, S_ID_WIDTH + SEL_WIDTH);
    if (DATA_WIDTH < 8 || (DATA_WIDTH & (DATA_WIDTH - 1)) != 0)
        $fatal(1, "axi_interconnect: DATA_WIDTH must be a power of two of at least 8 (got %0d)",
               DATA_WIDTH);
    if (ADDR_WIDTH < 1)
        $fatal(1, "axi_interconnect: ADDR_WIDTH must be at least 1 (got %0d)", ADDR_WIDTH);
    if (W_FIFO_DEPTH < 1)
        $fatal(1, "axi_interconnect: W_FIFO_DEPTH must be at least 1 (got %0d)", W_FIFO_DEPTH);
end

// Round robin: {found, index} of the first requester after `last`, wrapping around.
function [IDX_WIDTH:0] rr_pick;
    input [S_COUNT-1:0]   req;
    input [IDX_WIDTH-1:0] last;
    integer k;
    reg [IDX_WIDTH-1:0] idx;
    begin
        rr_pick = {1'b0, last};
        idx = last;
        for (k = 0; k < S_COUNT; k = k + 1) begin
            idx = (idx == LAST_IDX) ? {IDX_WIDTH{1'b0}} : idx + 1'b1;
            if (!rr_pick[IDX_WIDTH] && req[idx])
                rr_pick = {1'b1, idx};
        end
    end
endfunction

// The slave-side IDs of every master's request: {master index, ID} (just the ID when S_COUNT is 1)
wire [S_COUNT*M_ID_WIDTH-1:0] s_axi_arid_wide;
wire [S_COUNT*M_ID_WIDTH-1:0] s_axi_awid_wide;

genvar gi;
generate
    for (gi = 0; gi < S_COUNT; gi = gi + 1) begin : g_id
        if (S_COUNT > 1) begin : g_widen
            localparam integer GI = gi;
            assign s_axi_arid_wide[gi*M_ID_WIDTH +: M_ID_WIDTH] =
                {GI[SEL_WIDTH-1:0], s_axi_arid[gi*S_ID_WIDTH +: S_ID_WIDTH]};
            assign s_axi_awid_wide[gi*M_ID_WIDTH +: M_ID_WIDTH] =
                {GI[SEL_WIDTH-1:0], s_axi_awid[gi*S_ID_WIDTH +: S_ID_WIDTH]};
        end else begin : g_same
            assign s_axi_arid_wide = s_axi_arid;
            assign s_axi_awid_wide = s_axi_awid;
        end
    end
endgenerate

// ---------------------------------------------------------------------------------------------
// AR: round-robin arbiter into a registered output stage
reg                   m_axi_arvalid_reg, m_axi_arvalid_next;
reg [M_ID_WIDTH-1:0]  m_axi_arid_reg, m_axi_arid_next;
reg [ADDR_WIDTH-1:0]  m_axi_araddr_reg, m_axi_araddr_next;
reg [7:0]             m_axi_arlen_reg, m_axi_arlen_next;
reg [2:0]             m_axi_arsize_reg, m_axi_arsize_next;
reg [1:0]             m_axi_arburst_reg, m_axi_arburst_next;
reg [IDX_WIDTH-1:0]   ar_last_reg, ar_last_next;
reg [S_COUNT-1:0]     s_axi_arready_int;

wire [IDX_WIDTH:0]    ar_pick = rr_pick(s_axi_arvalid, ar_last_reg);
wire                  ar_found = ar_pick[IDX_WIDTH];
wire [IDX_WIDTH-1:0]  ar_idx = ar_pick[IDX_WIDTH-1:0];

assign s_axi_arready = s_axi_arready_int;
assign m_axi_arvalid = m_axi_arvalid_reg;
assign m_axi_arid = m_axi_arid_reg;
assign m_axi_araddr = m_axi_araddr_reg;
assign m_axi_arlen = m_axi_arlen_reg;
assign m_axi_arsize = m_axi_arsize_reg;
assign m_axi_arburst = m_axi_arburst_reg;

integer ai;
always @* begin
    m_axi_arvalid_next = m_axi_arvalid_reg && !m_axi_arready;
    m_axi_arid_next = m_axi_arid_reg;
    m_axi_araddr_next = m_axi_araddr_reg;
    m_axi_arlen_next = m_axi_arlen_reg;
    m_axi_arsize_next = m_axi_arsize_reg;
    m_axi_arburst_next = m_axi_arburst_reg;
    ar_last_next = ar_last_reg;
    s_axi_arready_int = {S_COUNT{1'b0}};

    // The stage takes a request when it is empty or being emptied this cycle.
    if (ar_found && (!m_axi_arvalid_reg || m_axi_arready)) begin
        ar_last_next = ar_idx;
        m_axi_arvalid_next = 1'b1;
        for (ai = 0; ai < S_COUNT; ai = ai + 1) begin
            if (ar_idx == ai[IDX_WIDTH-1:0]) begin
                s_axi_arready_int[ai] = 1'b1;
                m_axi_arid_next = s_axi_arid_wide[ai*M_ID_WIDTH +: M_ID_WIDTH];
                m_axi_araddr_next = s_axi_araddr[ai*ADDR_WIDTH +: ADDR_WIDTH];
                m_axi_arlen_next = s_axi_arlen[ai*8 +: 8];
                m_axi_arsize_next = s_axi_arsize[ai*3 +: 3];
                m_axi_arburst_next = s_axi_arburst[ai*2 +: 2];
            end
        end
    end
end

always @(posedge clk) begin
    m_axi_arvalid_reg <= m_axi_arvalid_next;
    m_axi_arid_reg <= m_axi_arid_next;
    m_axi_araddr_reg <= m_axi_araddr_next;
    m_axi_arlen_reg <= m_axi_arlen_next;
    m_axi_arsize_reg <= m_axi_arsize_next;
    m_axi_arburst_reg <= m_axi_arburst_next;
    ar_last_reg <= ar_last_next;

    if (rst) begin
        m_axi_arvalid_reg <= 1'b0;
        ar_last_reg <= LAST_IDX;
    end
end

// ---------------------------------------------------------------------------------------------
// AW: the same arbiter, also gated by room in the W routing FIFO
reg                   m_axi_awvalid_reg, m_axi_awvalid_next;
reg [M_ID_WIDTH-1:0]  m_axi_awid_reg, m_axi_awid_next;
reg [ADDR_WIDTH-1:0]  m_axi_awaddr_reg, m_axi_awaddr_next;
reg [7:0]             m_axi_awlen_reg, m_axi_awlen_next;
reg [2:0]             m_axi_awsize_reg, m_axi_awsize_next;
reg [1:0]             m_axi_awburst_reg, m_axi_awburst_next;
reg [IDX_WIDTH-1:0]   aw_last_reg, aw_last_next;
reg [S_COUNT-1:0]     s_axi_awready_int;
reg                   aw_push;

wire [IDX_WIDTH:0]    aw_pick = rr_pick(s_axi_awvalid, aw_last_reg);
wire                  aw_found = aw_pick[IDX_WIDTH];
wire [IDX_WIDTH-1:0]  aw_idx = aw_pick[IDX_WIDTH-1:0];

// W routing FIFO: indices of granted masters whose write data has not passed yet
reg [IDX_WIDTH-1:0]      wfifo_mem [0:W_FIFO_DEPTH-1];
reg [FIFO_PTR_WIDTH-1:0] wfifo_wr_ptr_reg;
reg [FIFO_PTR_WIDTH-1:0] wfifo_rd_ptr_reg;
reg [FIFO_CNT_WIDTH-1:0] wfifo_count_reg;
wire                     wfifo_full = wfifo_count_reg == FIFO_FULL;
wire                     w_active = wfifo_count_reg != {FIFO_CNT_WIDTH{1'b0}};
wire [IDX_WIDTH-1:0]     w_idx = wfifo_mem[wfifo_rd_ptr_reg];
wire                     w_pop = m_axi_wvalid && m_axi_wready && m_axi_wlast;

assign s_axi_awready = s_axi_awready_int;
assign m_axi_awvalid = m_axi_awvalid_reg;
assign m_axi_awid = m_axi_awid_reg;
assign m_axi_awaddr = m_axi_awaddr_reg;
assign m_axi_awlen = m_axi_awlen_reg;
assign m_axi_awsize = m_axi_awsize_reg;
assign m_axi_awburst = m_axi_awburst_reg;

integer bi;
always @* begin
    m_axi_awvalid_next = m_axi_awvalid_reg && !m_axi_awready;
    m_axi_awid_next = m_axi_awid_reg;
    m_axi_awaddr_next = m_axi_awaddr_reg;
    m_axi_awlen_next = m_axi_awlen_reg;
    m_axi_awsize_next = m_axi_awsize_reg;
    m_axi_awburst_next = m_axi_awburst_reg;
    aw_last_next = aw_last_reg;
    s_axi_awready_int = {S_COUNT{1'b0}};
    aw_push = 1'b0;

    if (aw_found && (!m_axi_awvalid_reg || m_axi_awready) && !wfifo_full) begin
        aw_last_next = aw_idx;
        aw_push = 1'b1;
        m_axi_awvalid_next = 1'b1;
        for (bi = 0; bi < S_COUNT; bi = bi + 1) begin
            if (aw_idx == bi[IDX_WIDTH-1:0]) begin
                s_axi_awready_int[bi] = 1'b1;
                m_axi_awid_next = s_axi_awid_wide[bi*M_ID_WIDTH +: M_ID_WIDTH];
                m_axi_awaddr_next = s_axi_awaddr[bi*ADDR_WIDTH +: ADDR_WIDTH];
                m_axi_awlen_next = s_axi_awlen[bi*8 +: 8];
                m_axi_awsize_next = s_axi_awsize[bi*3 +: 3];
                m_axi_awburst_next = s_axi_awburst[bi*2 +: 2];
            end
        end
    end
end

always @(posedge clk) begin
    m_axi_awvalid_reg <= m_axi_awvalid_next;
    m_axi_awid_reg <= m_axi_awid_next;
    m_axi_awaddr_reg <= m_axi_awaddr_next;
    m_axi_awlen_reg <= m_axi_awlen_next;
    m_axi_awsize_reg <= m_axi_awsize_next;
    m_axi_awburst_reg <= m_axi_awburst_next;
    aw_last_reg <= aw_last_next;

    if (aw_push) begin
        wfifo_mem[wfifo_wr_ptr_reg] <= aw_idx;
        wfifo_wr_ptr_reg <= wfifo_wr_ptr_reg == FIFO_LAST ? {FIFO_PTR_WIDTH{1'b0}}
                                                          : wfifo_wr_ptr_reg + 1'b1;
    end
    if (w_pop) begin
        wfifo_rd_ptr_reg <= wfifo_rd_ptr_reg == FIFO_LAST ? {FIFO_PTR_WIDTH{1'b0}}
                                                          : wfifo_rd_ptr_reg + 1'b1;
    end
    if (aw_push && !w_pop)
        wfifo_count_reg <= wfifo_count_reg + 1'b1;
    else if (w_pop && !aw_push)
        wfifo_count_reg <= wfifo_count_reg - 1'b1;

    if (rst) begin
        m_axi_awvalid_reg <= 1'b0;
        aw_last_reg <= LAST_IDX;
        wfifo_wr_ptr_reg <= {FIFO_PTR_WIDTH{1'b0}};
        wfifo_rd_ptr_reg <= {FIFO_PTR_WIDTH{1'b0}};
        wfifo_count_reg <= {FIFO_CNT_WIDTH{1'b0}};
    end
end

// ---------------------------------------------------------------------------------------------
// W: the master at the head of the routing FIFO owns the write data channel up to WLAST
reg [S_COUNT-1:0]     s_axi_wready_int;
reg [DATA_WIDTH-1:0]  m_axi_wdata_int;
reg [STRB_WIDTH-1:0]  m_axi_wstrb_int;
reg                   m_axi_wlast_int;
reg                   m_axi_wvalid_int;

assign s_axi_wready = s_axi_wready_int;
assign m_axi_wdata = m_axi_wdata_int;
assign m_axi_wstrb = m_axi_wstrb_int;
assign m_axi_wlast = m_axi_wlast_int;
assign m_axi_wvalid = m_axi_wvalid_int;

// Two blocks, so that the path m_axi_wready -> s_axi_wready is separate from s_axi_w* ->
// m_axi_w* (a slave whose WREADY depends on WVALID would otherwise look like a loop).
integer wi, wj;
always @* begin
    m_axi_wdata_int = {DATA_WIDTH{1'b0}};
    m_axi_wstrb_int = {STRB_WIDTH{1'b0}};
    m_axi_wlast_int = 1'b0;
    m_axi_wvalid_int = 1'b0;
    for (wi = 0; wi < S_COUNT; wi = wi + 1) begin
        if (w_active && w_idx == wi[IDX_WIDTH-1:0]) begin
            m_axi_wdata_int = s_axi_wdata[wi*DATA_WIDTH +: DATA_WIDTH];
            m_axi_wstrb_int = s_axi_wstrb[wi*STRB_WIDTH +: STRB_WIDTH];
            m_axi_wlast_int = s_axi_wlast[wi];
            m_axi_wvalid_int = s_axi_wvalid[wi];
        end
    end
end

always @* begin
    s_axi_wready_int = {S_COUNT{1'b0}};
    for (wj = 0; wj < S_COUNT; wj = wj + 1)
        if (w_active && w_idx == wj[IDX_WIDTH-1:0])
            s_axi_wready_int[wj] = m_axi_wready;
end

// ---------------------------------------------------------------------------------------------
// R and B: routed back by the index in the top ID bits, which are removed
wire [IDX_WIDTH-1:0] r_idx;
wire [IDX_WIDTH-1:0] b_idx;

generate
    if (S_COUNT > 1) begin : g_route
        assign r_idx = m_axi_rid[M_ID_WIDTH-1 -: IDX_WIDTH];
        assign b_idx = m_axi_bid[M_ID_WIDTH-1 -: IDX_WIDTH];
    end else begin : g_single
        assign r_idx = 1'b0;
        assign b_idx = 1'b0;
    end
endgenerate

assign s_axi_rid = {S_COUNT{m_axi_rid[S_ID_WIDTH-1:0]}};
assign s_axi_rdata = {S_COUNT{m_axi_rdata}};
assign s_axi_rresp = {S_COUNT{m_axi_rresp}};
assign s_axi_rlast = {S_COUNT{m_axi_rlast}};
assign s_axi_bid = {S_COUNT{m_axi_bid[S_ID_WIDTH-1:0]}};
assign s_axi_bresp = {S_COUNT{m_axi_bresp}};

reg [S_COUNT-1:0] s_axi_rvalid_int;
reg [S_COUNT-1:0] s_axi_bvalid_int;
reg               m_axi_rready_int;
reg               m_axi_bready_int;

assign s_axi_rvalid = s_axi_rvalid_int;
assign s_axi_bvalid = s_axi_bvalid_int;
assign m_axi_rready = m_axi_rready_int;
assign m_axi_bready = m_axi_bready_int;

integer ri;
always @* begin
    s_axi_rvalid_int = {S_COUNT{1'b0}};
    m_axi_rready_int = 1'b1;    // drains an index that names no master
    for (ri = 0; ri < S_COUNT; ri = ri + 1) begin
        if (r_idx == ri[IDX_WIDTH-1:0]) begin
            s_axi_rvalid_int[ri] = m_axi_rvalid;
            m_axi_rready_int = s_axi_rready[ri];
        end
    end
end

integer bri;
always @* begin
    s_axi_bvalid_int = {S_COUNT{1'b0}};
    m_axi_bready_int = 1'b1;    // drains an index that names no master
    for (bri = 0; bri < S_COUNT; bri = bri + 1) begin
        if (b_idx == bri[IDX_WIDTH-1:0]) begin
            s_axi_bvalid_int[bri] = m_axi_bvalid;
            m_axi_bready_int = s_axi_bready[bri];
        end
    end
end

endmodule

`resetall
