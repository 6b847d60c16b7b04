`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "card_regs.vh"
`include "accel_cfg.vh"

// The card on the AXI host link (the fast mode): card_core (BAR0 register block, DMA engine,
// accelerator, AXI interconnect, DRAM controller) with BAR0 as an AXI4-Lite slave and the DMA
// engine's host port as an AXI4 master (dma_axi_port.v) served by the host-memory model. The
// PCIe card is card_top_pcie.
//
//   host --BAR0 (AXI4-Lite)--> card_core (csr, dma_core, accel, axi_interconnect, dram_ctrl)
//   host memory <--AXI4 (m_axi_host)-- dma_axi_port <-- dma_core host port
module card_top #(
    parameter [63:0]  MEM_SIZE = 64'd1073741824,   // card memory bytes
    parameter integer DATA_WIDTH = 512,                     // card data bus width
    parameter integer RING_LINES = 512,                     // DMA ring buffer lines
    parameter integer DRAM_QUEUE_DEPTH = 16,                // DRAM controller request queue
    parameter integer ACC_N = `ACCEL_N,                     // accelerator GEMM array size
    parameter integer ACC_INP_DEPTH = `ACCEL_INP_DEPTH,     // accelerator input scratchpad rows
    parameter integer ACC_WGT_DEPTH = `ACCEL_WGT_DEPTH,     // accelerator weight scratchpad rows
    parameter integer ACC_ACC_DEPTH = `ACCEL_ACC_DEPTH,     // accelerator accumulator rows
    parameter integer ACC_QUEUE_DEPTH = `ACCEL_QUEUE_DEPTH  // accelerator instruction queue depth
) (
    input  wire                      clk,
    input  wire                      rst,

    // BAR0
    input  wire [11:0]               s_axil_awaddr,
    input  wire                      s_axil_awvalid,
    output wire                      s_axil_awready,
    input  wire [31:0]               s_axil_wdata,
    input  wire [3:0]                s_axil_wstrb,
    input  wire                      s_axil_wvalid,
    output wire                      s_axil_wready,
    output wire [1:0]                s_axil_bresp,
    output wire                      s_axil_bvalid,
    input  wire                      s_axil_bready,
    input  wire [11:0]               s_axil_araddr,
    input  wire                      s_axil_arvalid,
    output wire                      s_axil_arready,
    output wire [31:0]               s_axil_rdata,
    output wire [1:0]                s_axil_rresp,
    output wire                      s_axil_rvalid,
    input  wire                      s_axil_rready,

    // host memory (the DMA engine's host port)
    output wire [5:0]                m_axi_host_arid,
    output wire [63:0]               m_axi_host_araddr,
    output wire [7:0]                m_axi_host_arlen,
    output wire [2:0]                m_axi_host_arsize,
    output wire [1:0]                m_axi_host_arburst,
    output wire                      m_axi_host_arvalid,
    input  wire                      m_axi_host_arready,
    input  wire [5:0]                m_axi_host_rid,
    input  wire [DATA_WIDTH-1:0]     m_axi_host_rdata,
    input  wire [1:0]                m_axi_host_rresp,
    input  wire                      m_axi_host_rlast,
    input  wire                      m_axi_host_rvalid,
    output wire                      m_axi_host_rready,
    output wire [5:0]                m_axi_host_awid,
    output wire [63:0]               m_axi_host_awaddr,
    output wire [7:0]                m_axi_host_awlen,
    output wire [2:0]                m_axi_host_awsize,
    output wire [1:0]                m_axi_host_awburst,
    output wire                      m_axi_host_awvalid,
    input  wire                      m_axi_host_awready,
    output wire [DATA_WIDTH-1:0]     m_axi_host_wdata,
    output wire [DATA_WIDTH/8-1:0]   m_axi_host_wstrb,
    output wire                      m_axi_host_wlast,
    output wire                      m_axi_host_wvalid,
    input  wire                      m_axi_host_wready,
    input  wire [5:0]                m_axi_host_bid,
    input  wire [1:0]                m_axi_host_bresp,
    input  wire                      m_axi_host_bvalid,
    output wire                      m_axi_host_bready,

    output wire                      irq
);

wire                  rd_req_valid, rd_req_ready, rd_cpl_valid, rd_cpl_ready, rd_cpl_last,
                      rd_cpl_err;
wire [63:0]           rd_req_addr;
wire [12:0]           rd_req_len;
wire [5:0]            rd_req_tag, rd_cpl_tag;
wire [DATA_WIDTH-1:0] rd_cpl_data;
wire                  wr_req_valid, wr_req_ready, wr_dat_valid, wr_dat_ready, wr_dat_last,
                      wr_cpl_valid, wr_cpl_err;
wire [63:0]           wr_req_addr;
wire [12:0]           wr_req_len;
wire [DATA_WIDTH-1:0] wr_dat_data;
wire [DATA_WIDTH/8-1:0] wr_dat_strb;
wire [2*`DMA_CHANNELS+1:0] irq_vec;

card_core #(
    .MEM_SIZE(MEM_SIZE), .DATA_WIDTH(DATA_WIDTH), .RING_LINES(RING_LINES),
    .DRAM_QUEUE_DEPTH(DRAM_QUEUE_DEPTH), .ACC_N(ACC_N), .ACC_INP_DEPTH(ACC_INP_DEPTH),
    .ACC_WGT_DEPTH(ACC_WGT_DEPTH), .ACC_ACC_DEPTH(ACC_ACC_DEPTH),
    .ACC_QUEUE_DEPTH(ACC_QUEUE_DEPTH)
) core (
    .clk(clk), .rst(rst),
    .s_axil_awaddr(s_axil_awaddr),
    .s_axil_awvalid(s_axil_awvalid),
    .s_axil_awready(s_axil_awready),
    .s_axil_wdata(s_axil_wdata),
    .s_axil_wstrb(s_axil_wstrb),
    .s_axil_wvalid(s_axil_wvalid),
    .s_axil_wready(s_axil_wready),
    .s_axil_bresp(s_axil_bresp),
    .s_axil_bvalid(s_axil_bvalid),
    .s_axil_bready(s_axil_bready),
    .s_axil_araddr(s_axil_araddr),
    .s_axil_arvalid(s_axil_arvalid),
    .s_axil_arready(s_axil_arready),
    .s_axil_rdata(s_axil_rdata),
    .s_axil_rresp(s_axil_rresp),
    .s_axil_rvalid(s_axil_rvalid),
    .s_axil_rready(s_axil_rready),
    .h_rd_req_valid(rd_req_valid), .h_rd_req_ready(rd_req_ready), .h_rd_req_addr(rd_req_addr),
    .h_rd_req_len(rd_req_len), .h_rd_req_tag(rd_req_tag),
    .h_rd_cpl_valid(rd_cpl_valid), .h_rd_cpl_ready(rd_cpl_ready), .h_rd_cpl_tag(rd_cpl_tag),
    .h_rd_cpl_data(rd_cpl_data), .h_rd_cpl_last(rd_cpl_last), .h_rd_cpl_err(rd_cpl_err),
    .h_wr_req_valid(wr_req_valid), .h_wr_req_ready(wr_req_ready), .h_wr_req_addr(wr_req_addr),
    .h_wr_req_len(wr_req_len), .h_wr_dat_valid(wr_dat_valid), .h_wr_dat_ready(wr_dat_ready),
    .h_wr_dat_data(wr_dat_data), .h_wr_dat_strb(wr_dat_strb), .h_wr_dat_last(wr_dat_last),
    .h_wr_cpl_valid(wr_cpl_valid), .h_wr_cpl_err(wr_cpl_err),
    .link_mps(13'd4096), .link_mrrs(13'd4096),
    .irq(irq), .irq_vec(irq_vec)
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

// the AXI host link has one interrupt line; the per-source vector is for the PCIe top's MSI-X
wire unused_ok = &{1'b0, irq_vec};

endmodule

`resetall
