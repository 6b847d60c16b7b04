`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "card_regs.vh"
`include "accel_cfg.vh"

// The card without its host link: BAR0 register block, the DMA engine (dma_core), the
// accelerator, the AXI interconnect and the DRAM controller. The interconnect's masters are the
// DMA engine's card port (0) and the accelerator (1). card_top puts the AXI host link on it
// (AXI4-Lite BAR0, the AXI4 host-port adapter); card_top_pcie the PCIe endpoint.
//
//   BAR0 (AXI4-Lite) --> csr --> dma_core --card port--> axi_interconnect --> dram_ctrl
//                         \----> accel -----------------^
//   host port (request/completion) <-- dma_core
module card_core #(
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

    // the DMA engine's host port (request/completion interface of dma_engine.v)
    output wire                      h_rd_req_valid,
    input  wire                      h_rd_req_ready,
    output wire [63:0]               h_rd_req_addr,
    output wire [12:0]               h_rd_req_len,
    output wire [5:0]                h_rd_req_tag,
    input  wire                      h_rd_cpl_valid,
    output wire                      h_rd_cpl_ready,
    input  wire [5:0]                h_rd_cpl_tag,
    input  wire [DATA_WIDTH-1:0]     h_rd_cpl_data,
    input  wire                      h_rd_cpl_last,
    input  wire                      h_rd_cpl_err,
    output wire                      h_wr_req_valid,
    input  wire                      h_wr_req_ready,
    output wire [63:0]               h_wr_req_addr,
    output wire [12:0]               h_wr_req_len,
    output wire                      h_wr_dat_valid,
    input  wire                      h_wr_dat_ready,
    output wire [DATA_WIDTH-1:0]     h_wr_dat_data,
    output wire [DATA_WIDTH/8-1:0]   h_wr_dat_strb,
    output wire                      h_wr_dat_last,
    input  wire                      h_wr_cpl_valid,
    input  wire                      h_wr_cpl_err,

    // the link's negotiated max payload and read request sizes (bytes): valid DMA_MPS / DMA_MRRS
    // values above them are lowered to them (4096: no limit)
    input  wire [12:0]               link_mps,
    input  wire [12:0]               link_mrrs,

    output wire                      irq,
    output wire [2*`DMA_CHANNELS+1:0] irq_vec       // IRQ_STATUS & IRQ_MASK
);

localparam integer CARD_AW = 32;
localparam integer MASTERS = 2;                  // DMA card port, accelerator
localparam integer S_ID = 6;
localparam integer M_ID = S_ID + $clog2(MASTERS);
localparam integer DW = DATA_WIDTH;
localparam integer SW = DATA_WIDTH / 8;

// --- register block <-> DMA engine
wire [3*64-1:0] ch_desc_addr, ch_wb_addr, ch_bytes;
wire [2:0]      ch_run, ch_reset, ch_busy, ch_done, ch_error, irq_done, irq_err;
wire [12:0]     cfg_mps, cfg_mrrs;
wire [7:0]      cfg_tags;
wire [3*8-1:0]  ch_err_code;
wire [3*32-1:0] ch_completed, ch_descs;
wire [8*64-1:0] dram_counters;

// --- register block <-> accelerator
wire        acc_reg_wr, acc_irq_done, acc_irq_err;
wire [11:0] acc_reg_waddr, acc_reg_raddr;
wire [31:0] acc_reg_wdata, acc_reg_rdata;
wire [3:0]  acc_reg_wstrb;
wire        acc_reg_re;

// --- masters into the interconnect (flattened, master i at [i*W +: W])
wire [MASTERS*S_ID-1:0]    c_awid, c_bid, c_arid, c_rid;
wire [MASTERS*CARD_AW-1:0] c_awaddr, c_araddr;
wire [MASTERS*8-1:0]       c_awlen, c_arlen;
wire [MASTERS*3-1:0]       c_awsize, c_arsize;
wire [MASTERS*2-1:0]       c_awburst, c_arburst, c_bresp, c_rresp;
wire [MASTERS-1:0]         c_awvalid, c_awready, c_wlast, c_wvalid, c_wready, c_bvalid,
                           c_bready, c_arvalid, c_arready, c_rlast, c_rvalid, c_rready;
wire [MASTERS*DW-1:0]      c_wdata, c_rdata;
wire [MASTERS*SW-1:0]      c_wstrb;

// --- interconnect to DRAM
wire [M_ID-1:0]    d_awid, d_bid, d_arid, d_rid;
wire [CARD_AW-1:0] d_awaddr, d_araddr;
wire [7:0]         d_awlen, d_arlen;
wire [2:0]         d_awsize, d_arsize;
wire [1:0]         d_awburst, d_arburst, d_bresp, d_rresp;
wire               d_awvalid, d_awready, d_wlast, d_wvalid, d_wready, d_bvalid, d_bready,
                   d_arvalid, d_arready, d_rlast, d_rvalid, d_rready;
wire [DW-1:0]      d_wdata, d_rdata;
wire [SW-1:0]      d_wstrb;

// A valid request limit above the link's is lowered to it; an invalid one reaches the engine
// unchanged, which stops the chain with BAD_CONFIG as on every card.
function [12:0] limit;
    input [12:0] csr_value;
    input [12:0] link_value;
    limit = (csr_value >= 13'd128 && (csr_value & (csr_value - 13'd1)) == 13'd0
             && csr_value > link_value) ? link_value : csr_value;
endfunction
wire [12:0] csr_mps, csr_mrrs;
assign cfg_mps = limit(csr_mps, link_mps);
assign cfg_mrrs = limit(csr_mrrs, link_mrrs);

csr #(
    .MEM_SIZE(MEM_SIZE), .DATA_WIDTH(DATA_WIDTH), .ACCEL(1)
) regs (
    .clk(clk), .rst(rst),
    .s_axil_awaddr(s_axil_awaddr), .s_axil_awvalid(s_axil_awvalid),
    .s_axil_awready(s_axil_awready), .s_axil_wdata(s_axil_wdata), .s_axil_wstrb(s_axil_wstrb),
    .s_axil_wvalid(s_axil_wvalid), .s_axil_wready(s_axil_wready), .s_axil_bresp(s_axil_bresp),
    .s_axil_bvalid(s_axil_bvalid), .s_axil_bready(s_axil_bready),
    .s_axil_araddr(s_axil_araddr), .s_axil_arvalid(s_axil_arvalid),
    .s_axil_arready(s_axil_arready), .s_axil_rdata(s_axil_rdata), .s_axil_rresp(s_axil_rresp),
    .s_axil_rvalid(s_axil_rvalid), .s_axil_rready(s_axil_rready),
    .ch_desc_addr(ch_desc_addr), .ch_wb_addr(ch_wb_addr), .ch_run(ch_run), .ch_reset(ch_reset),
    .cfg_mps(csr_mps), .cfg_mrrs(csr_mrrs), .cfg_tags(cfg_tags),
    .ch_busy(ch_busy), .ch_done(ch_done), .ch_error(ch_error), .ch_err_code(ch_err_code),
    .ch_completed(ch_completed), .ch_bytes(ch_bytes), .ch_descs(ch_descs),
    .irq_done(irq_done), .irq_err(irq_err),
    .dram_counters(dram_counters),
    .acc_reg_wr(acc_reg_wr), .acc_reg_waddr(acc_reg_waddr), .acc_reg_wdata(acc_reg_wdata),
    .acc_reg_wstrb(acc_reg_wstrb), .acc_reg_raddr(acc_reg_raddr), .acc_reg_re(acc_reg_re),
    .acc_reg_rdata(acc_reg_rdata),
    .acc_irq_done(acc_irq_done), .acc_irq_err(acc_irq_err),
    .irq(irq), .irq_vec(irq_vec)
);

accel #(
    .N(ACC_N), .INP_DEPTH(ACC_INP_DEPTH), .WGT_DEPTH(ACC_WGT_DEPTH), .ACC_DEPTH(ACC_ACC_DEPTH),
    .QUEUE_DEPTH(ACC_QUEUE_DEPTH), .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(CARD_AW), .ID_WIDTH(S_ID)
) acc (
    .clk(clk), .rst(rst),
    .reg_wr(acc_reg_wr), .reg_waddr(acc_reg_waddr), .reg_wdata(acc_reg_wdata),
    .reg_wstrb(acc_reg_wstrb), .reg_raddr(acc_reg_raddr), .reg_re(acc_reg_re), .reg_rdata(acc_reg_rdata),
    .irq_done(acc_irq_done), .irq_err(acc_irq_err),
    .m_axi_awid(c_awid[S_ID +: S_ID]), .m_axi_awaddr(c_awaddr[CARD_AW +: CARD_AW]),
    .m_axi_awlen(c_awlen[8 +: 8]), .m_axi_awsize(c_awsize[3 +: 3]),
    .m_axi_awburst(c_awburst[2 +: 2]), .m_axi_awvalid(c_awvalid[1]),
    .m_axi_awready(c_awready[1]), .m_axi_wdata(c_wdata[DW +: DW]),
    .m_axi_wstrb(c_wstrb[SW +: SW]), .m_axi_wlast(c_wlast[1]), .m_axi_wvalid(c_wvalid[1]),
    .m_axi_wready(c_wready[1]), .m_axi_bid(c_bid[S_ID +: S_ID]), .m_axi_bresp(c_bresp[2 +: 2]),
    .m_axi_bvalid(c_bvalid[1]), .m_axi_bready(c_bready[1]),
    .m_axi_arid(c_arid[S_ID +: S_ID]), .m_axi_araddr(c_araddr[CARD_AW +: CARD_AW]),
    .m_axi_arlen(c_arlen[8 +: 8]), .m_axi_arsize(c_arsize[3 +: 3]),
    .m_axi_arburst(c_arburst[2 +: 2]), .m_axi_arvalid(c_arvalid[1]),
    .m_axi_arready(c_arready[1]), .m_axi_rid(c_rid[S_ID +: S_ID]),
    .m_axi_rdata(c_rdata[DW +: DW]), .m_axi_rresp(c_rresp[2 +: 2]), .m_axi_rlast(c_rlast[1]),
    .m_axi_rvalid(c_rvalid[1]), .m_axi_rready(c_rready[1])
);

dma_core #(
    .DATA_WIDTH(DATA_WIDTH), .CARD_ADDR_WIDTH(CARD_AW), .RING_LINES(RING_LINES),
    .WR_OUTSTANDING(32)
) dma (
    .clk(clk), .rst(rst),
    .ch_desc_addr(ch_desc_addr), .ch_wb_addr(ch_wb_addr), .ch_run(ch_run), .ch_reset(ch_reset),
    .cfg_mps(cfg_mps), .cfg_mrrs(cfg_mrrs), .cfg_tags(cfg_tags),
    .ch_busy(ch_busy), .ch_done(ch_done), .ch_error(ch_error), .ch_err_code(ch_err_code),
    .ch_completed(ch_completed), .ch_bytes(ch_bytes), .ch_descs(ch_descs),
    .irq_done(irq_done), .irq_err(irq_err),
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
    .m_axi_card_arid(c_arid[0 +: S_ID]), .m_axi_card_araddr(c_araddr[0 +: CARD_AW]),
    .m_axi_card_arlen(c_arlen[0 +: 8]), .m_axi_card_arsize(c_arsize[0 +: 3]),
    .m_axi_card_arburst(c_arburst[0 +: 2]), .m_axi_card_arvalid(c_arvalid[0]),
    .m_axi_card_arready(c_arready[0]), .m_axi_card_rid(c_rid[0 +: S_ID]),
    .m_axi_card_rdata(c_rdata[0 +: DW]), .m_axi_card_rresp(c_rresp[0 +: 2]),
    .m_axi_card_rlast(c_rlast[0]), .m_axi_card_rvalid(c_rvalid[0]),
    .m_axi_card_rready(c_rready[0]), .m_axi_card_awid(c_awid[0 +: S_ID]),
    .m_axi_card_awaddr(c_awaddr[0 +: CARD_AW]), .m_axi_card_awlen(c_awlen[0 +: 8]),
    .m_axi_card_awsize(c_awsize[0 +: 3]), .m_axi_card_awburst(c_awburst[0 +: 2]),
    .m_axi_card_awvalid(c_awvalid[0]), .m_axi_card_awready(c_awready[0]),
    .m_axi_card_wdata(c_wdata[0 +: DW]), .m_axi_card_wstrb(c_wstrb[0 +: SW]),
    .m_axi_card_wlast(c_wlast[0]), .m_axi_card_wvalid(c_wvalid[0]),
    .m_axi_card_wready(c_wready[0]), .m_axi_card_bid(c_bid[0 +: S_ID]),
    .m_axi_card_bresp(c_bresp[0 +: 2]), .m_axi_card_bvalid(c_bvalid[0]),
    .m_axi_card_bready(c_bready[0])
);

axi_interconnect #(
    .S_COUNT(MASTERS), .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(CARD_AW), .S_ID_WIDTH(S_ID),
    .M_ID_WIDTH(M_ID)
) xbar (
    .clk(clk), .rst(rst),
    .s_axi_awid(c_awid), .s_axi_awaddr(c_awaddr), .s_axi_awlen(c_awlen),
    .s_axi_awsize(c_awsize), .s_axi_awburst(c_awburst), .s_axi_awvalid(c_awvalid),
    .s_axi_awready(c_awready), .s_axi_wdata(c_wdata), .s_axi_wstrb(c_wstrb),
    .s_axi_wlast(c_wlast), .s_axi_wvalid(c_wvalid), .s_axi_wready(c_wready),
    .s_axi_bid(c_bid), .s_axi_bresp(c_bresp), .s_axi_bvalid(c_bvalid), .s_axi_bready(c_bready),
    .s_axi_arid(c_arid), .s_axi_araddr(c_araddr), .s_axi_arlen(c_arlen),
    .s_axi_arsize(c_arsize), .s_axi_arburst(c_arburst), .s_axi_arvalid(c_arvalid),
    .s_axi_arready(c_arready), .s_axi_rid(c_rid), .s_axi_rdata(c_rdata), .s_axi_rresp(c_rresp),
    .s_axi_rlast(c_rlast), .s_axi_rvalid(c_rvalid), .s_axi_rready(c_rready),
    .m_axi_awid(d_awid), .m_axi_awaddr(d_awaddr), .m_axi_awlen(d_awlen),
    .m_axi_awsize(d_awsize), .m_axi_awburst(d_awburst), .m_axi_awvalid(d_awvalid),
    .m_axi_awready(d_awready), .m_axi_wdata(d_wdata), .m_axi_wstrb(d_wstrb),
    .m_axi_wlast(d_wlast), .m_axi_wvalid(d_wvalid), .m_axi_wready(d_wready),
    .m_axi_bid(d_bid), .m_axi_bresp(d_bresp), .m_axi_bvalid(d_bvalid), .m_axi_bready(d_bready),
    .m_axi_arid(d_arid), .m_axi_araddr(d_araddr), .m_axi_arlen(d_arlen),
    .m_axi_arsize(d_arsize), .m_axi_arburst(d_arburst), .m_axi_arvalid(d_arvalid),
    .m_axi_arready(d_arready), .m_axi_rid(d_rid), .m_axi_rdata(d_rdata), .m_axi_rresp(d_rresp),
    .m_axi_rlast(d_rlast), .m_axi_rvalid(d_rvalid), .m_axi_rready(d_rready)
);

wire [63:0] st_rd, st_wr, st_hit, st_miss, st_conflict, st_refresh, st_ref_stall, st_busy;
assign dram_counters = {st_busy, st_ref_stall, st_refresh, st_conflict, st_miss, st_hit, st_wr,
                        st_rd};

/* verilator lint_off PINCONNECTEMPTY */
dram_ctrl #(
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(CARD_AW), .ID_WIDTH(M_ID), .MEM_SIZE(MEM_SIZE),
    .QUEUE_DEPTH(DRAM_QUEUE_DEPTH)
) dram (
    .clk(clk), .rst(rst),
    .s_axi_awid(d_awid), .s_axi_awaddr(d_awaddr), .s_axi_awlen(d_awlen),
    .s_axi_awsize(d_awsize), .s_axi_awburst(d_awburst), .s_axi_awvalid(d_awvalid),
    .s_axi_awready(d_awready), .s_axi_wdata(d_wdata), .s_axi_wstrb(d_wstrb),
    .s_axi_wlast(d_wlast), .s_axi_wvalid(d_wvalid), .s_axi_wready(d_wready),
    .s_axi_bid(d_bid), .s_axi_bresp(d_bresp), .s_axi_bvalid(d_bvalid), .s_axi_bready(d_bready),
    .s_axi_arid(d_arid), .s_axi_araddr(d_araddr), .s_axi_arlen(d_arlen),
    .s_axi_arsize(d_arsize), .s_axi_arburst(d_arburst), .s_axi_arvalid(d_arvalid),
    .s_axi_arready(d_arready), .s_axi_rid(d_rid), .s_axi_rdata(d_rdata), .s_axi_rresp(d_rresp),
    .s_axi_rlast(d_rlast), .s_axi_rvalid(d_rvalid), .s_axi_rready(d_rready),
    .stat_rd(st_rd), .stat_wr(st_wr), .stat_row_hit(st_hit), .stat_row_miss(st_miss),
    .stat_row_conflict(st_conflict), .stat_refresh(st_refresh), .stat_ref_stall(st_ref_stall),
    .stat_busy(st_busy),
    // the command trace is for the dram_ctrl bench; the card does not use it
    .trace_cycle(), .trace_row_valid(), .trace_row_cmd(), .trace_row_bg(), .trace_row_ba(),
    .trace_row_row(), .trace_col_valid(), .trace_col_cmd(), .trace_col_bg(), .trace_col_ba(),
    .trace_col_col(), .trace_col_row()
);
/* verilator lint_on PINCONNECTEMPTY */

endmodule

`resetall
