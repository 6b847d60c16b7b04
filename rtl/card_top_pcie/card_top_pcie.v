`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "card_regs.vh"
`include "accel_cfg.vh"
`include "pcie_cfg.vh"

// The card as a PCIe endpoint: card_core (registers, DMA engine, accelerator, interconnect,
// DRAM) behind the UltraScale+ PCIe hard IP's user interface (512-bit AXI4-Stream, DWORD
// aligned; the hard IP itself is cocotbext-pcie's model in simulation). STRADDLE (default
// `PCIE_STRADDLE, pyhost/spec/pcie.py) sets the requester streams' straddling, which the hard
// IP must be configured for alike: RQ two TLPs per beat, RC two or four (PG213); 0: one TLP per
// run of beats on both. The completer streams are never straddled.
//
//   hard IP CQ --> async FIFO --> pcie_cq_bridge --AXI4-Lite--> csr (BAR0 MMIO)
//   hard IP CC <-- async FIFO <--/          \----> pcie_msix (BAR2: MSI-X table, PBA)
//   hard IP RQ <-- async FIFO <-- pcie_rq_adapter <-- DMA engine host port, MSI-X messages
//   hard IP RC --> async FIFO --/
//
// The hard IP's side runs on its user clock (250 MHz), everything else on the card clock
// (400 MHz); four asynchronous FIFOs and two-flop synchronisers of the configuration status
// (max payload / read request size, MSI-X enable and function mask) join the domains. The DMA
// engine's request limits are lowered to what the link negotiated (Device Control).
module card_top_pcie #(
    parameter [63:0]  MEM_SIZE = 64'd1073741824,   // card memory bytes
    parameter integer DATA_WIDTH = 512,                     // card data bus and link width
    parameter integer RING_LINES = 512,                     // DMA ring buffer lines
    parameter integer DRAM_QUEUE_DEPTH = 16,                // DRAM controller request queue
    parameter integer ACC_N = `ACCEL_N,                     // accelerator GEMM array size
    parameter integer ACC_INP_DEPTH = `ACCEL_INP_DEPTH,     // accelerator input scratchpad rows
    parameter integer ACC_WGT_DEPTH = `ACCEL_WGT_DEPTH,     // accelerator weight scratchpad rows
    parameter integer ACC_ACC_DEPTH = `ACCEL_ACC_DEPTH,     // accelerator accumulator rows
    parameter integer ACC_QUEUE_DEPTH = `ACCEL_QUEUE_DEPTH, // accelerator instruction queue depth
    parameter integer FIFO_DEPTH_LOG2 = 4,                  // log2 of each clock-crossing FIFO
    parameter integer STRADDLE = `PCIE_STRADDLE             // requester straddling (above)
) (
    input  wire                      clk,             // card clock
    input  wire                      rst,

    // hard IP: clock, reset
    input  wire                      user_clk,
    input  wire                      user_reset,

    // requester request (card -> hard IP)
    output wire [511:0]              m_axis_rq_tdata,
    output wire [15:0]               m_axis_rq_tkeep,
    output wire                      m_axis_rq_tlast,
    output wire [136:0]              m_axis_rq_tuser,
    output wire                      m_axis_rq_tvalid,
    input  wire                      m_axis_rq_tready,
    // requester completion (hard IP -> card)
    input  wire [511:0]              s_axis_rc_tdata,
    input  wire [15:0]               s_axis_rc_tkeep,
    input  wire                      s_axis_rc_tlast,
    input  wire [160:0]              s_axis_rc_tuser,
    input  wire                      s_axis_rc_tvalid,
    output wire                      s_axis_rc_tready,
    // completer request (hard IP -> card)
    input  wire [511:0]              s_axis_cq_tdata,
    input  wire [15:0]               s_axis_cq_tkeep,
    input  wire                      s_axis_cq_tlast,
    input  wire [182:0]              s_axis_cq_tuser,
    input  wire                      s_axis_cq_tvalid,
    output wire                      s_axis_cq_tready,
    // completer completion (card -> hard IP)
    output wire [511:0]              m_axis_cc_tdata,
    output wire [15:0]               m_axis_cc_tkeep,
    output wire                      m_axis_cc_tlast,
    output wire [80:0]               m_axis_cc_tuser,
    output wire                      m_axis_cc_tvalid,
    input  wire                      m_axis_cc_tready,

    // configuration status (hard IP, user clock domain)
    input  wire [2:0]                cfg_max_payload,
    input  wire [2:0]                cfg_max_read_req,
    input  wire [3:0]                cfg_interrupt_msix_enable,
    input  wire [3:0]                cfg_interrupt_msix_mask,

    // the card's interrupt line as on card_top (for waveforms; the host sees MSI-X)
    output wire                      irq
);

localparam integer NV = `PCIE_MSIX_VECTORS;

// ---- clock crossings
wire [511:0] rq_data, rc_data, cq_data, cc_data;
wire [15:0]  rq_keep, cc_keep;
wire         rq_last, rc_last, cq_last, cc_last;
wire [36:0]  rq_user, rq_user_x;
wire [31:0]  rc_sop_eop;
wire         rq_valid, rq_ready, rc_valid, rc_ready, cq_valid, cq_ready, cc_valid, cc_ready;
wire [3:0]   cq_first_be;

pcie_async_fifo #(.WIDTH(512 + 16 + 1 + 37), .DEPTH_LOG2(FIFO_DEPTH_LOG2)) rq_fifo (
    .wr_clk(clk), .wr_rst(rst),
    .s_data({rq_user, rq_last, rq_keep, rq_data}),
    .s_valid(rq_valid), .s_ready(rq_ready),
    .rd_clk(user_clk), .rd_rst(user_reset),
    .m_data({rq_user_x, m_axis_rq_tlast, m_axis_rq_tkeep, m_axis_rq_tdata}),
    .m_valid(m_axis_rq_tvalid), .m_ready(m_axis_rq_tready)
);
// tuser [36:0]: byte enables, is_sop / is_eop and their pointers (straddling), discontinue;
// no sequence numbers, no parity
assign m_axis_rq_tuser = {100'd0, rq_user_x};

// RC: data, last, and tuser [95:64] (is_sop / is_eop and their pointers: straddling)
pcie_async_fifo #(.WIDTH(512 + 1 + 32), .DEPTH_LOG2(FIFO_DEPTH_LOG2)) rc_fifo (
    .wr_clk(user_clk), .wr_rst(user_reset),
    .s_data({s_axis_rc_tuser[95:64], s_axis_rc_tlast, s_axis_rc_tdata}),
    .s_valid(s_axis_rc_tvalid), .s_ready(s_axis_rc_tready),
    .rd_clk(clk), .rd_rst(rst),
    .m_data({rc_sop_eop, rc_last, rc_data}), .m_valid(rc_valid), .m_ready(rc_ready)
);

pcie_async_fifo #(.WIDTH(512 + 1 + 4), .DEPTH_LOG2(FIFO_DEPTH_LOG2)) cq_fifo (
    .wr_clk(user_clk), .wr_rst(user_reset),
    .s_data({s_axis_cq_tuser[3:0], s_axis_cq_tlast, s_axis_cq_tdata}),
    .s_valid(s_axis_cq_tvalid), .s_ready(s_axis_cq_tready),
    .rd_clk(clk), .rd_rst(rst),
    .m_data({cq_first_be, cq_last, cq_data}), .m_valid(cq_valid), .m_ready(cq_ready)
);

pcie_async_fifo #(.WIDTH(512 + 16 + 1), .DEPTH_LOG2(FIFO_DEPTH_LOG2)) cc_fifo (
    .wr_clk(clk), .wr_rst(rst),
    .s_data({cc_last, cc_keep, cc_data}), .s_valid(cc_valid), .s_ready(cc_ready),
    .rd_clk(user_clk), .rd_rst(user_reset),
    .m_data({m_axis_cc_tlast, m_axis_cc_tkeep, m_axis_cc_tdata}),
    .m_valid(m_axis_cc_tvalid), .m_ready(m_axis_cc_tready)
);
assign m_axis_cc_tuser = 81'd0;      // no straddling, no discontinue, no parity

// ---- configuration status into the card clock (quasi-static: changed by config writes)
reg [7:0] cfg_s1, cfg_s2;
always @(posedge clk) begin
    cfg_s1 <= {cfg_interrupt_msix_mask[0], cfg_interrupt_msix_enable[0], cfg_max_read_req,
               cfg_max_payload};
    cfg_s2 <= cfg_s1;
end
wire [2:0]  mps_code = cfg_s2[2:0];
wire [2:0]  mrrs_code = cfg_s2[5:3];
wire        msix_enable = cfg_s2[6];
wire        msix_fmask = cfg_s2[7];
wire [12:0] link_mps = 13'd128 << (mps_code > 3'd5 ? 3'd5 : mps_code);
wire [12:0] link_mrrs = 13'd128 << (mrrs_code > 3'd5 ? 3'd5 : mrrs_code);

// ---- the card
wire        h_rd_req_valid, h_rd_req_ready, h_rd_cpl_valid, h_rd_cpl_ready, h_rd_cpl_last,
            h_rd_cpl_err;
wire [63:0] h_rd_req_addr;
wire [12:0] h_rd_req_len;
wire [5:0]  h_rd_req_tag, h_rd_cpl_tag;
wire [DATA_WIDTH-1:0] h_rd_cpl_data;
wire        h_wr_req_valid, h_wr_req_ready, h_wr_dat_valid, h_wr_dat_ready, h_wr_dat_last,
            h_wr_cpl_valid, h_wr_cpl_err;
wire [63:0] h_wr_req_addr;
wire [12:0] h_wr_req_len;
wire [DATA_WIDTH-1:0]   h_wr_dat_data;
wire [DATA_WIDTH/8-1:0] h_wr_dat_strb;
wire [2*`DMA_CHANNELS+1:0] irq_vec;

wire [11:0] axil_awaddr, axil_araddr;
wire        axil_awvalid, axil_awready, axil_wvalid, axil_wready, axil_bvalid, axil_bready,
            axil_arvalid, axil_arready, axil_rvalid, axil_rready;
wire [31:0] axil_wdata, axil_rdata;
wire [3:0]  axil_wstrb;
wire [1:0]  axil_bresp, axil_rresp;

card_core #(
    .MEM_SIZE(MEM_SIZE), .DATA_WIDTH(DATA_WIDTH), .RING_LINES(RING_LINES),
    .DRAM_QUEUE_DEPTH(DRAM_QUEUE_DEPTH), .ACC_N(ACC_N), .ACC_INP_DEPTH(ACC_INP_DEPTH),
    .ACC_WGT_DEPTH(ACC_WGT_DEPTH), .ACC_ACC_DEPTH(ACC_ACC_DEPTH),
    .ACC_QUEUE_DEPTH(ACC_QUEUE_DEPTH)
) core (
    .clk(clk), .rst(rst),
    .s_axil_awaddr(axil_awaddr), .s_axil_awvalid(axil_awvalid), .s_axil_awready(axil_awready),
    .s_axil_wdata(axil_wdata), .s_axil_wstrb(axil_wstrb), .s_axil_wvalid(axil_wvalid),
    .s_axil_wready(axil_wready), .s_axil_bresp(axil_bresp), .s_axil_bvalid(axil_bvalid),
    .s_axil_bready(axil_bready), .s_axil_araddr(axil_araddr), .s_axil_arvalid(axil_arvalid),
    .s_axil_arready(axil_arready), .s_axil_rdata(axil_rdata), .s_axil_rresp(axil_rresp),
    .s_axil_rvalid(axil_rvalid), .s_axil_rready(axil_rready),
    .h_rd_req_valid(h_rd_req_valid), .h_rd_req_ready(h_rd_req_ready),
    .h_rd_req_addr(h_rd_req_addr), .h_rd_req_len(h_rd_req_len), .h_rd_req_tag(h_rd_req_tag),
    .h_rd_cpl_valid(h_rd_cpl_valid), .h_rd_cpl_ready(h_rd_cpl_ready),
    .h_rd_cpl_tag(h_rd_cpl_tag), .h_rd_cpl_data(h_rd_cpl_data), .h_rd_cpl_last(h_rd_cpl_last),
    .h_rd_cpl_err(h_rd_cpl_err), .h_wr_req_valid(h_wr_req_valid),
    .h_wr_req_ready(h_wr_req_ready), .h_wr_req_addr(h_wr_req_addr),
    .h_wr_req_len(h_wr_req_len), .h_wr_dat_valid(h_wr_dat_valid),
    .h_wr_dat_ready(h_wr_dat_ready), .h_wr_dat_data(h_wr_dat_data),
    .h_wr_dat_strb(h_wr_dat_strb), .h_wr_dat_last(h_wr_dat_last),
    .h_wr_cpl_valid(h_wr_cpl_valid), .h_wr_cpl_err(h_wr_cpl_err),
    .link_mps(link_mps), .link_mrrs(link_mrrs),
    .irq(irq), .irq_vec(irq_vec)
);

// ---- MSI-X
wire        msix_wr, msix_rhit, msg_valid, msg_ready;
wire [11:0] msix_waddr, msix_raddr;
wire [31:0] msix_wdata, msix_rdata, msg_data;
wire [3:0]  msix_wstrb;
wire [63:0] msg_addr;

pcie_msix #(.VECTORS(NV)) msix (
    .clk(clk), .rst(rst),
    .source(irq_vec[NV-1:0]), .msix_enable(msix_enable), .function_mask(msix_fmask),
    .reg_wr(msix_wr), .reg_waddr(msix_waddr), .reg_wdata(msix_wdata), .reg_wstrb(msix_wstrb),
    .reg_raddr(msix_raddr), .reg_rdata(msix_rdata), .reg_rhit(msix_rhit),
    .msg_valid(msg_valid), .msg_ready(msg_ready), .msg_addr(msg_addr), .msg_data(msg_data)
);

// ---- completer: BAR accesses
wire [15:0] stat_unsupported;
pcie_cq_bridge #(.DATA_WIDTH(512)) completer (
    .clk(clk), .rst(rst),
    .s_axis_cq_tdata(cq_data), .s_axis_cq_first_be(cq_first_be), .s_axis_cq_tlast(cq_last),
    .s_axis_cq_tvalid(cq_valid), .s_axis_cq_tready(cq_ready),
    .m_axis_cc_tdata(cc_data), .m_axis_cc_tkeep(cc_keep), .m_axis_cc_tlast(cc_last),
    .m_axis_cc_tvalid(cc_valid), .m_axis_cc_tready(cc_ready),
    .m_axil_awaddr(axil_awaddr), .m_axil_awvalid(axil_awvalid), .m_axil_awready(axil_awready),
    .m_axil_wdata(axil_wdata), .m_axil_wstrb(axil_wstrb), .m_axil_wvalid(axil_wvalid),
    .m_axil_wready(axil_wready), .m_axil_bresp(axil_bresp), .m_axil_bvalid(axil_bvalid),
    .m_axil_bready(axil_bready), .m_axil_araddr(axil_araddr), .m_axil_arvalid(axil_arvalid),
    .m_axil_arready(axil_arready), .m_axil_rdata(axil_rdata), .m_axil_rresp(axil_rresp),
    .m_axil_rvalid(axil_rvalid), .m_axil_rready(axil_rready),
    .msix_wr(msix_wr), .msix_waddr(msix_waddr), .msix_wdata(msix_wdata),
    .msix_wstrb(msix_wstrb), .msix_raddr(msix_raddr), .msix_rdata(msix_rdata),
    .msix_rhit(msix_rhit), .stat_unsupported(stat_unsupported)
);

// ---- requester: DMA and MSI-X messages
pcie_rq_adapter #(.DATA_WIDTH(DATA_WIDTH), .STRADDLE(STRADDLE)) requester (
    .clk(clk), .rst(rst),
    .rd_req_valid(h_rd_req_valid), .rd_req_ready(h_rd_req_ready),
    .rd_req_addr(h_rd_req_addr), .rd_req_len(h_rd_req_len), .rd_req_tag(h_rd_req_tag),
    .rd_cpl_valid(h_rd_cpl_valid), .rd_cpl_ready(h_rd_cpl_ready),
    .rd_cpl_tag(h_rd_cpl_tag), .rd_cpl_data(h_rd_cpl_data), .rd_cpl_last(h_rd_cpl_last),
    .rd_cpl_err(h_rd_cpl_err),
    .wr_req_valid(h_wr_req_valid), .wr_req_ready(h_wr_req_ready),
    .wr_req_addr(h_wr_req_addr), .wr_req_len(h_wr_req_len),
    .wr_dat_valid(h_wr_dat_valid), .wr_dat_ready(h_wr_dat_ready),
    .wr_dat_data(h_wr_dat_data), .wr_dat_strb(h_wr_dat_strb), .wr_dat_last(h_wr_dat_last),
    .wr_cpl_valid(h_wr_cpl_valid), .wr_cpl_err(h_wr_cpl_err),
    .msix_valid(msg_valid), .msix_ready(msg_ready), .msix_addr(msg_addr),
    .msix_data(msg_data),
    .m_axis_rq_tdata(rq_data), .m_axis_rq_tkeep(rq_keep), .m_axis_rq_tlast(rq_last),
    .m_axis_rq_tuser(rq_user), .m_axis_rq_tvalid(rq_valid), .m_axis_rq_tready(rq_ready),
    .s_axis_rc_tdata(rc_data), .s_axis_rc_sop_eop(rc_sop_eop), .s_axis_rc_tlast(rc_last),
    .s_axis_rc_tvalid(rc_valid),
    .s_axis_rc_tready(rc_ready)
);

// Unused: the streams' keep and the user bits not carried (byte enables and parity of RC and CQ
// beyond first_be: DWORD counts come from the descriptors), the upper config bits (one physical function), the accelerator's two
// IRQ_STATUS bits beyond the vectors (none: the map has exactly NV), the unsupported counter
// (waveforms).
wire unused_ok = &{1'b0, s_axis_rc_tkeep, s_axis_rc_tuser[160:96], s_axis_rc_tuser[63:0],
                   s_axis_cq_tkeep, s_axis_cq_tuser[182:4], cfg_interrupt_msix_enable[3:1],
                   cfg_interrupt_msix_mask[3:1], stat_unsupported};

endmodule

`resetall
