`resetall
`timescale 1ns / 1ps
`default_nettype none

// dma_core: the DMA engine (dma_engine.v) with its card port, an AXI4 master on the card's
// interconnect. The host side is left as dma_engine's request/completion interface, for the
// AXI4 host port (dma_axi_port.v, in card_top and pcie_dma) or the PCIe requester adapter
// (pcie_rq_adapter.v, in card_top_pcie). Registers live in csr.v; this block gets their values
// and returns status.
module dma_core #(
    parameter integer DATA_WIDTH = 512,      // data width of both ports
    parameter integer CARD_ADDR_WIDTH = 32,  // card port address width
    parameter integer RING_LINES = 512,      // ring buffer lines (see dma_engine.v)
    parameter integer WR_OUTSTANDING = 32,   // write requests in flight
    parameter integer CLOCK_GATE = 1         // 1: clock engine and card port only when active
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire [3*64-1:0]               ch_desc_addr,
    input  wire [3*64-1:0]               ch_wb_addr,
    input  wire [2:0]                    ch_run,
    input  wire [2:0]                    ch_reset,
    input  wire [12:0]                   cfg_mps,
    input  wire [12:0]                   cfg_mrrs,
    input  wire [7:0]                    cfg_tags,
    output wire [2:0]                    ch_busy,
    output wire [2:0]                    ch_done,
    output wire [2:0]                    ch_error,
    output wire [3*8-1:0]                ch_err_code,
    output wire [3*32-1:0]               ch_completed,
    output wire [3*64-1:0]               ch_bytes,
    output wire [3*32-1:0]               ch_descs,
    output wire [2:0]                    irq_done,
    output wire [2:0]                    irq_err,

    // host port: the engine's request/completion interface (dma_engine.v), for an adapter
    output wire                          h_rd_req_valid,
    input  wire                          h_rd_req_ready,
    output wire [63:0]                   h_rd_req_addr,
    output wire [12:0]                   h_rd_req_len,
    output wire [5:0]                    h_rd_req_tag,
    input  wire                          h_rd_cpl_valid,
    output wire                          h_rd_cpl_ready,
    input  wire [5:0]                    h_rd_cpl_tag,
    input  wire [DATA_WIDTH-1:0]         h_rd_cpl_data,
    input  wire                          h_rd_cpl_last,
    input  wire                          h_rd_cpl_err,
    output wire                          h_wr_req_valid,
    input  wire                          h_wr_req_ready,
    output wire [63:0]                   h_wr_req_addr,
    output wire [12:0]                   h_wr_req_len,
    output wire                          h_wr_dat_valid,
    input  wire                          h_wr_dat_ready,
    output wire [DATA_WIDTH-1:0]         h_wr_dat_data,
    output wire [DATA_WIDTH/8-1:0]       h_wr_dat_strb,
    output wire                          h_wr_dat_last,
    input  wire                          h_wr_cpl_valid,
    input  wire                          h_wr_cpl_err,

    output wire [5:0]                    m_axi_card_arid,
    output wire [CARD_ADDR_WIDTH-1:0]    m_axi_card_araddr,
    output wire [7:0]                    m_axi_card_arlen,
    output wire [2:0]                    m_axi_card_arsize,
    output wire [1:0]                    m_axi_card_arburst,
    output wire                          m_axi_card_arvalid,
    input  wire                          m_axi_card_arready,
    input  wire [5:0]                    m_axi_card_rid,
    input  wire [DATA_WIDTH-1:0]         m_axi_card_rdata,
    input  wire [1:0]                    m_axi_card_rresp,
    input  wire                          m_axi_card_rlast,
    input  wire                          m_axi_card_rvalid,
    output wire                          m_axi_card_rready,
    output wire [5:0]                    m_axi_card_awid,
    output wire [CARD_ADDR_WIDTH-1:0]    m_axi_card_awaddr,
    output wire [7:0]                    m_axi_card_awlen,
    output wire [2:0]                    m_axi_card_awsize,
    output wire [1:0]                    m_axi_card_awburst,
    output wire                          m_axi_card_awvalid,
    input  wire                          m_axi_card_awready,
    output wire [DATA_WIDTH-1:0]         m_axi_card_wdata,
    output wire [DATA_WIDTH/8-1:0]       m_axi_card_wstrb,
    output wire                          m_axi_card_wlast,
    output wire                          m_axi_card_wvalid,
    input  wire                          m_axi_card_wready,
    input  wire [5:0]                    m_axi_card_bid,
    input  wire [1:0]                    m_axi_card_bresp,
    input  wire                          m_axi_card_bvalid,
    output wire                          m_axi_card_bready
);

wire [1:0]              rd_req_valid, rd_req_ready, rd_cpl_valid, rd_cpl_ready, rd_cpl_last,
                        rd_cpl_err;
wire [2*64-1:0]         rd_req_addr;
wire [2*13-1:0]         rd_req_len;
wire [2*6-1:0]          rd_req_tag;
wire [2*6-1:0]          rd_cpl_tag;
wire [2*DATA_WIDTH-1:0] rd_cpl_data;
wire [1:0]              wr_req_valid, wr_req_ready, wr_dat_valid, wr_dat_ready, wr_cpl_valid,
                        wr_cpl_err;
wire [63:0]             wr_req_addr;
wire [12:0]             wr_req_len;
wire [DATA_WIDTH-1:0]   wr_dat_data;
wire [DATA_WIDTH/8-1:0] wr_dat_strb;
wire                    wr_dat_last;

initial begin
    if (CLOCK_GATE != 0 && CLOCK_GATE != 1)
        $fatal(1, "dma_core: CLOCK_GATE must be 0 or 1, got %0d", CLOCK_GATE);
end

// The engine and its card port run on a gated clock (CLOCK_GATE = 0: always clocked). Between
// chains their state holds (every register keeps its value while no chain is busy, no run or
// reset pulse comes and no completion arrives), so gating changes nothing they do, cycle for
// cycle: it only keeps an idle DMA from being clocked, which also lets a simulator skip its
// logic while the rest of the card works. The gate stays open two cycles after the last
// activity, for the status and interrupt pulses of a finished chain and the engine's return to
// its idle values. tb/pcie_dma/lockstep.py checks the claim: the DMA bench runs a gated and an
// ungated copy side by side and compares every output in every cycle.
wire       gclk;
wire       wake = rst || (|ch_run) || (|ch_reset) || (|ch_busy) || (|rd_cpl_valid)
                  || (|wr_cpl_valid);
reg  [1:0] wake_q;
always @(posedge clk) wake_q <= rst ? 2'b11 : {wake_q[0], wake};
clock_gate gate (.clk(clk), .en(CLOCK_GATE == 0 || wake || (|wake_q)), .gclk(gclk));

dma_engine #(
    .DATA_WIDTH(DATA_WIDTH),
    .CARD_ADDR_WIDTH(CARD_ADDR_WIDTH),
    .RING_LINES(RING_LINES),
    .WR_OUTSTANDING(WR_OUTSTANDING)
) engine (
    .clk(gclk), .rst(rst),
    .ch_desc_addr(ch_desc_addr), .ch_wb_addr(ch_wb_addr), .ch_run(ch_run), .ch_reset(ch_reset),
    .cfg_mps(cfg_mps), .cfg_mrrs(cfg_mrrs), .cfg_tags(cfg_tags),
    .ch_busy(ch_busy), .ch_done(ch_done), .ch_error(ch_error), .ch_err_code(ch_err_code),
    .ch_completed(ch_completed), .ch_bytes(ch_bytes), .ch_descs(ch_descs),
    .irq_done(irq_done), .irq_err(irq_err),
    .rd_req_valid(rd_req_valid), .rd_req_ready(rd_req_ready), .rd_req_addr(rd_req_addr),
    .rd_req_len(rd_req_len), .rd_req_tag(rd_req_tag),
    .rd_cpl_valid(rd_cpl_valid), .rd_cpl_ready(rd_cpl_ready), .rd_cpl_tag(rd_cpl_tag),
    .rd_cpl_data(rd_cpl_data), .rd_cpl_last(rd_cpl_last), .rd_cpl_err(rd_cpl_err),
    .wr_req_valid(wr_req_valid), .wr_req_ready(wr_req_ready), .wr_req_addr(wr_req_addr),
    .wr_req_len(wr_req_len), .wr_dat_valid(wr_dat_valid), .wr_dat_ready(wr_dat_ready),
    .wr_dat_data(wr_dat_data), .wr_dat_strb(wr_dat_strb), .wr_dat_last(wr_dat_last),
    .wr_cpl_valid(wr_cpl_valid), .wr_cpl_err(wr_cpl_err)
);

// The host port leaves the block: pcie_dma puts the AXI4 adapter on it, card_top_pcie the PCIe
// requester adapter.
assign h_rd_req_valid = rd_req_valid[0];
assign rd_req_ready[0] = h_rd_req_ready;
assign h_rd_req_addr = rd_req_addr[0 +: 64];
assign h_rd_req_len = rd_req_len[0 +: 13];
assign h_rd_req_tag = rd_req_tag[0 +: 6];
assign rd_cpl_valid[0] = h_rd_cpl_valid;
assign h_rd_cpl_ready = rd_cpl_ready[0];
assign rd_cpl_tag[0 +: 6] = h_rd_cpl_tag;
assign rd_cpl_data[0 +: DATA_WIDTH] = h_rd_cpl_data;
assign rd_cpl_last[0] = h_rd_cpl_last;
assign rd_cpl_err[0] = h_rd_cpl_err;
assign h_wr_req_valid = wr_req_valid[0];
assign wr_req_ready[0] = h_wr_req_ready;
assign h_wr_req_addr = wr_req_addr;
assign h_wr_req_len = wr_req_len;
assign h_wr_dat_valid = wr_dat_valid[0];
assign wr_dat_ready[0] = h_wr_dat_ready;
assign h_wr_dat_data = wr_dat_data;
assign h_wr_dat_strb = wr_dat_strb;
assign h_wr_dat_last = wr_dat_last;
assign wr_cpl_valid[0] = h_wr_cpl_valid;
assign wr_cpl_err[0] = h_wr_cpl_err;

dma_axi_port #(
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(CARD_ADDR_WIDTH), .TAG_WIDTH(6), .LEN_WIDTH(13)
) card_port (
    .clk(gclk), .rst(rst),
    .rd_req_valid(rd_req_valid[1]), .rd_req_ready(rd_req_ready[1]),
    .rd_req_addr(rd_req_addr[64 +: 64]), .rd_req_len(rd_req_len[13 +: 13]),
    .rd_req_tag(rd_req_tag[6 +: 6]),
    .rd_cpl_valid(rd_cpl_valid[1]), .rd_cpl_ready(rd_cpl_ready[1]),
    .rd_cpl_tag(rd_cpl_tag[6 +: 6]), .rd_cpl_data(rd_cpl_data[DATA_WIDTH +: DATA_WIDTH]),
    .rd_cpl_last(rd_cpl_last[1]), .rd_cpl_err(rd_cpl_err[1]),
    .wr_req_valid(wr_req_valid[1]), .wr_req_ready(wr_req_ready[1]), .wr_req_addr(wr_req_addr),
    .wr_req_len(wr_req_len), .wr_dat_valid(wr_dat_valid[1]), .wr_dat_ready(wr_dat_ready[1]),
    .wr_dat_data(wr_dat_data), .wr_dat_strb(wr_dat_strb), .wr_dat_last(wr_dat_last),
    .wr_cpl_valid(wr_cpl_valid[1]), .wr_cpl_err(wr_cpl_err[1]),
        .m_axi_arid(m_axi_card_arid),
        .m_axi_araddr(m_axi_card_araddr),
        .m_axi_arlen(m_axi_card_arlen),
        .m_axi_arsize(m_axi_card_arsize),
        .m_axi_arburst(m_axi_card_arburst),
        .m_axi_arvalid(m_axi_card_arvalid),
        .m_axi_arready(m_axi_card_arready),
        .m_axi_rid(m_axi_card_rid),
        .m_axi_rdata(m_axi_card_rdata),
        .m_axi_rresp(m_axi_card_rresp),
        .m_axi_rlast(m_axi_card_rlast),
        .m_axi_rvalid(m_axi_card_rvalid),
        .m_axi_rready(m_axi_card_rready),
        .m_axi_awid(m_axi_card_awid),
        .m_axi_awaddr(m_axi_card_awaddr),
        .m_axi_awlen(m_axi_card_awlen),
        .m_axi_awsize(m_axi_card_awsize),
        .m_axi_awburst(m_axi_card_awburst),
        .m_axi_awvalid(m_axi_card_awvalid),
        .m_axi_awready(m_axi_card_awready),
        .m_axi_wdata(m_axi_card_wdata),
        .m_axi_wstrb(m_axi_card_wstrb),
        .m_axi_wlast(m_axi_card_wlast),
        .m_axi_wvalid(m_axi_card_wvalid),
        .m_axi_wready(m_axi_card_wready),
        .m_axi_bid(m_axi_card_bid),
        .m_axi_bresp(m_axi_card_bresp),
        .m_axi_bvalid(m_axi_card_bvalid),
        .m_axi_bready(m_axi_card_bready)
);

endmodule

`resetall
