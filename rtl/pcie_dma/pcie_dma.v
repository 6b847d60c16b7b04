`resetall
`timescale 1ns / 1ps
`default_nettype none

// pcie_dma: the DMA engine with both ports as AXI4 masters: dma_core.v (the engine and its card
// port on the card's interconnect) and the AXI4 host-port adapter (dma_axi_port.v) served by the
// host-memory model (the DMA unit bench's top). card_top_pcie puts the PCIe requester adapter
// on dma_core instead. Registers live in csr.v; this block gets their values and returns status.
module pcie_dma #(
    parameter integer DATA_WIDTH = 512,      // data width of both ports
    parameter integer CARD_ADDR_WIDTH = 32,  // card port address width
    parameter integer RING_LINES = 512,      // ring buffer lines (see dma_engine.v)
    parameter integer WR_OUTSTANDING = 32,   // write requests in flight
    parameter integer CLOCK_GATE = 1         // dma_core's clock gate (0: always clocked)
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

    output wire [5:0]                    m_axi_host_arid,
    output wire [64-1:0]                 m_axi_host_araddr,
    output wire [7:0]                    m_axi_host_arlen,
    output wire [2:0]                    m_axi_host_arsize,
    output wire [1:0]                    m_axi_host_arburst,
    output wire                          m_axi_host_arvalid,
    input  wire                          m_axi_host_arready,
    input  wire [5:0]                    m_axi_host_rid,
    input  wire [DATA_WIDTH-1:0]         m_axi_host_rdata,
    input  wire [1:0]                    m_axi_host_rresp,
    input  wire                          m_axi_host_rlast,
    input  wire                          m_axi_host_rvalid,
    output wire                          m_axi_host_rready,
    output wire [5:0]                    m_axi_host_awid,
    output wire [64-1:0]                 m_axi_host_awaddr,
    output wire [7:0]                    m_axi_host_awlen,
    output wire [2:0]                    m_axi_host_awsize,
    output wire [1:0]                    m_axi_host_awburst,
    output wire                          m_axi_host_awvalid,
    input  wire                          m_axi_host_awready,
    output wire [DATA_WIDTH-1:0]         m_axi_host_wdata,
    output wire [DATA_WIDTH/8-1:0]       m_axi_host_wstrb,
    output wire                          m_axi_host_wlast,
    output wire                          m_axi_host_wvalid,
    input  wire                          m_axi_host_wready,
    input  wire [5:0]                    m_axi_host_bid,
    input  wire [1:0]                    m_axi_host_bresp,
    input  wire                          m_axi_host_bvalid,
    output wire                          m_axi_host_bready,
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

wire                    rd_req_valid, rd_req_ready, rd_cpl_valid, rd_cpl_ready, rd_cpl_last,
                        rd_cpl_err;
wire [63:0]             rd_req_addr;
wire [12:0]             rd_req_len;
wire [5:0]              rd_req_tag, rd_cpl_tag;
wire [DATA_WIDTH-1:0]   rd_cpl_data;
wire                    wr_req_valid, wr_req_ready, wr_dat_valid, wr_dat_ready, wr_dat_last,
                        wr_cpl_valid, wr_cpl_err;
wire [63:0]             wr_req_addr;
wire [12:0]             wr_req_len;
wire [DATA_WIDTH-1:0]   wr_dat_data;
wire [DATA_WIDTH/8-1:0] wr_dat_strb;

dma_core #(
    .DATA_WIDTH(DATA_WIDTH), .CARD_ADDR_WIDTH(CARD_ADDR_WIDTH), .RING_LINES(RING_LINES),
    .WR_OUTSTANDING(WR_OUTSTANDING), .CLOCK_GATE(CLOCK_GATE)
) core (
    .clk(clk), .rst(rst),
    .ch_desc_addr(ch_desc_addr), .ch_wb_addr(ch_wb_addr), .ch_run(ch_run), .ch_reset(ch_reset),
    .cfg_mps(cfg_mps), .cfg_mrrs(cfg_mrrs), .cfg_tags(cfg_tags),
    .ch_busy(ch_busy), .ch_done(ch_done), .ch_error(ch_error), .ch_err_code(ch_err_code),
    .ch_completed(ch_completed), .ch_bytes(ch_bytes), .ch_descs(ch_descs),
    .irq_done(irq_done), .irq_err(irq_err),
    .h_rd_req_valid(rd_req_valid), .h_rd_req_ready(rd_req_ready), .h_rd_req_addr(rd_req_addr),
    .h_rd_req_len(rd_req_len), .h_rd_req_tag(rd_req_tag),
    .h_rd_cpl_valid(rd_cpl_valid), .h_rd_cpl_ready(rd_cpl_ready), .h_rd_cpl_tag(rd_cpl_tag),
    .h_rd_cpl_data(rd_cpl_data), .h_rd_cpl_last(rd_cpl_last), .h_rd_cpl_err(rd_cpl_err),
    .h_wr_req_valid(wr_req_valid), .h_wr_req_ready(wr_req_ready), .h_wr_req_addr(wr_req_addr),
    .h_wr_req_len(wr_req_len), .h_wr_dat_valid(wr_dat_valid), .h_wr_dat_ready(wr_dat_ready),
    .h_wr_dat_data(wr_dat_data), .h_wr_dat_strb(wr_dat_strb), .h_wr_dat_last(wr_dat_last),
    .h_wr_cpl_valid(wr_cpl_valid), .h_wr_cpl_err(wr_cpl_err),
    .m_axi_card_arid(m_axi_card_arid),
    .m_axi_card_araddr(m_axi_card_araddr),
    .m_axi_card_arlen(m_axi_card_arlen),
    .m_axi_card_arsize(m_axi_card_arsize),
    .m_axi_card_arburst(m_axi_card_arburst),
    .m_axi_card_arvalid(m_axi_card_arvalid),
    .m_axi_card_arready(m_axi_card_arready),
    .m_axi_card_rid(m_axi_card_rid),
    .m_axi_card_rdata(m_axi_card_rdata),
    .m_axi_card_rresp(m_axi_card_rresp),
    .m_axi_card_rlast(m_axi_card_rlast),
    .m_axi_card_rvalid(m_axi_card_rvalid),
    .m_axi_card_rready(m_axi_card_rready),
    .m_axi_card_awid(m_axi_card_awid),
    .m_axi_card_awaddr(m_axi_card_awaddr),
    .m_axi_card_awlen(m_axi_card_awlen),
    .m_axi_card_awsize(m_axi_card_awsize),
    .m_axi_card_awburst(m_axi_card_awburst),
    .m_axi_card_awvalid(m_axi_card_awvalid),
    .m_axi_card_awready(m_axi_card_awready),
    .m_axi_card_wdata(m_axi_card_wdata),
    .m_axi_card_wstrb(m_axi_card_wstrb),
    .m_axi_card_wlast(m_axi_card_wlast),
    .m_axi_card_wvalid(m_axi_card_wvalid),
    .m_axi_card_wready(m_axi_card_wready),
    .m_axi_card_bid(m_axi_card_bid),
    .m_axi_card_bresp(m_axi_card_bresp),
    .m_axi_card_bvalid(m_axi_card_bvalid),
    .m_axi_card_bready(m_axi_card_bready)
);

dma_axi_port #(
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(64), .TAG_WIDTH(6), .LEN_WIDTH(13)
) host_port (
    .clk(clk), .rst(rst),
    .rd_req_valid(rd_req_valid), .rd_req_ready(rd_req_ready), .rd_req_addr(rd_req_addr),
    .rd_req_len(rd_req_len), .rd_req_tag(rd_req_tag),
    .rd_cpl_valid(rd_cpl_valid), .rd_cpl_ready(rd_cpl_ready), .rd_cpl_tag(rd_cpl_tag),
    .rd_cpl_data(rd_cpl_data), .rd_cpl_last(rd_cpl_last), .rd_cpl_err(rd_cpl_err),
    .wr_req_valid(wr_req_valid), .wr_req_ready(wr_req_ready), .wr_req_addr(wr_req_addr),
    .wr_req_len(wr_req_len), .wr_dat_valid(wr_dat_valid), .wr_dat_ready(wr_dat_ready),
    .wr_dat_data(wr_dat_data), .wr_dat_strb(wr_dat_strb), .wr_dat_last(wr_dat_last),
    .wr_cpl_valid(wr_cpl_valid), .wr_cpl_err(wr_cpl_err),
    .m_axi_arid(m_axi_host_arid),
    .m_axi_araddr(m_axi_host_araddr),
    .m_axi_arlen(m_axi_host_arlen),
    .m_axi_arsize(m_axi_host_arsize),
    .m_axi_arburst(m_axi_host_arburst),
    .m_axi_arvalid(m_axi_host_arvalid),
    .m_axi_arready(m_axi_host_arready),
    .m_axi_rid(m_axi_host_rid),
    .m_axi_rdata(m_axi_host_rdata),
    .m_axi_rresp(m_axi_host_rresp),
    .m_axi_rlast(m_axi_host_rlast),
    .m_axi_rvalid(m_axi_host_rvalid),
    .m_axi_rready(m_axi_host_rready),
    .m_axi_awid(m_axi_host_awid),
    .m_axi_awaddr(m_axi_host_awaddr),
    .m_axi_awlen(m_axi_host_awlen),
    .m_axi_awsize(m_axi_host_awsize),
    .m_axi_awburst(m_axi_host_awburst),
    .m_axi_awvalid(m_axi_host_awvalid),
    .m_axi_awready(m_axi_host_awready),
    .m_axi_wdata(m_axi_host_wdata),
    .m_axi_wstrb(m_axi_host_wstrb),
    .m_axi_wlast(m_axi_host_wlast),
    .m_axi_wvalid(m_axi_host_wvalid),
    .m_axi_wready(m_axi_host_wready),
    .m_axi_bid(m_axi_host_bid),
    .m_axi_bresp(m_axi_host_bresp),
    .m_axi_bvalid(m_axi_host_bvalid),
    .m_axi_bready(m_axi_host_bready)
);

endmodule

`resetall
