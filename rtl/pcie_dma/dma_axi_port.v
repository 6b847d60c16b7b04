`resetall
`timescale 1ns / 1ps
`default_nettype none

// DMA port adapter: the engine's request/completion interface on an AXI4 master.
//
// Read requests (address, byte length, tag) become one INCR burst each, ARID = tag, covering the
// DATA_WIDTH/8-byte lines the range touches; R beats come back as completions with their tag, so
// bursts of different tags may complete in any order and interleave. Write requests become one
// burst each (AWID 0, so responses return in order); the engine streams the line-aligned beats
// with strobes on the data interface; every B response is one write completion. The engine never
// asks for more than 4 KiB or across a 4 KiB boundary, so every burst is legal AXI.
module dma_axi_port #(
    parameter integer DATA_WIDTH = 512,      // AXI data width (one line per beat)
    parameter integer ADDR_WIDTH = 64,       // AXI address width
    parameter integer TAG_WIDTH = 6,         // request tag width = AXI ID width
    parameter integer LEN_WIDTH = 13         // request length field width (bytes, <= 4096)
) (
    input  wire                      clk,
    input  wire                      rst,

    // engine side: read requests and completions
    input  wire                      rd_req_valid,
    output wire                      rd_req_ready,
    input  wire [63:0]               rd_req_addr,
    input  wire [LEN_WIDTH-1:0]      rd_req_len,
    input  wire [TAG_WIDTH-1:0]      rd_req_tag,
    output wire                      rd_cpl_valid,
    input  wire                      rd_cpl_ready,
    output wire [TAG_WIDTH-1:0]      rd_cpl_tag,
    output wire [DATA_WIDTH-1:0]     rd_cpl_data,
    output wire                      rd_cpl_last,
    output wire                      rd_cpl_err,

    // engine side: write requests, write data, write completions
    input  wire                      wr_req_valid,
    output wire                      wr_req_ready,
    input  wire [63:0]               wr_req_addr,
    input  wire [LEN_WIDTH-1:0]      wr_req_len,
    input  wire                      wr_dat_valid,
    output wire                      wr_dat_ready,
    input  wire [DATA_WIDTH-1:0]     wr_dat_data,
    input  wire [DATA_WIDTH/8-1:0]   wr_dat_strb,
    input  wire                      wr_dat_last,
    output wire                      wr_cpl_valid,
    output wire                      wr_cpl_err,

    // AXI4 master
    output wire [TAG_WIDTH-1:0]      m_axi_arid,
    output wire [ADDR_WIDTH-1:0]     m_axi_araddr,
    output wire [7:0]                m_axi_arlen,
    output wire [2:0]                m_axi_arsize,
    output wire [1:0]                m_axi_arburst,
    output wire                      m_axi_arvalid,
    input  wire                      m_axi_arready,
    input  wire [TAG_WIDTH-1:0]      m_axi_rid,
    input  wire [DATA_WIDTH-1:0]     m_axi_rdata,
    input  wire [1:0]                m_axi_rresp,
    input  wire                      m_axi_rlast,
    input  wire                      m_axi_rvalid,
    output wire                      m_axi_rready,
    output wire [TAG_WIDTH-1:0]      m_axi_awid,
    output wire [ADDR_WIDTH-1:0]     m_axi_awaddr,
    output wire [7:0]                m_axi_awlen,
    output wire [2:0]                m_axi_awsize,
    output wire [1:0]                m_axi_awburst,
    output wire                      m_axi_awvalid,
    input  wire                      m_axi_awready,
    output wire [DATA_WIDTH-1:0]     m_axi_wdata,
    output wire [DATA_WIDTH/8-1:0]   m_axi_wstrb,
    output wire                      m_axi_wlast,
    output wire                      m_axi_wvalid,
    input  wire                      m_axi_wready,
    input  wire [TAG_WIDTH-1:0]      m_axi_bid,
    input  wire [1:0]                m_axi_bresp,
    input  wire                      m_axi_bvalid,
    output wire                      m_axi_bready
);

localparam integer LINE_SHIFT = $clog2(DATA_WIDTH / 8);

initial begin
    if (ADDR_WIDTH > 64 || ADDR_WIDTH < 12)
        $fatal(1, "dma_axi_port: ADDR_WIDTH must be 12..64, got %0d", ADDR_WIDTH);
    if (LEN_WIDTH < LINE_SHIFT + 1 || LEN_WIDTH > 13)
        $fatal(1, "dma_axi_port: LEN_WIDTH must be %0d..13, got %0d", LINE_SHIFT + 1, LEN_WIDTH);
end

// Beats of a request: lines touched by [addr, addr + len).
function [7:0] burst_len;
    input [63:0] addr;
    input [LEN_WIDTH-1:0] len;
    reg [63:0] last;
    reg [63:0] first_line, last_line;
    begin
        last = addr + {{64-LEN_WIDTH{1'b0}}, len} - 64'd1;
        first_line = addr >> LINE_SHIFT;
        last_line = last >> LINE_SHIFT;
        burst_len = last_line[7:0] - first_line[7:0];
    end
endfunction

// AR and AW output registers: hold the request while the slave is not ready.
reg                  ar_valid_reg, aw_valid_reg;
reg [TAG_WIDTH-1:0]  ar_id_reg;
reg [ADDR_WIDTH-1:0] ar_addr_reg, aw_addr_reg;
reg [7:0]            ar_len_reg, aw_len_reg;

assign rd_req_ready = !ar_valid_reg || m_axi_arready;
assign wr_req_ready = !aw_valid_reg || m_axi_awready;

always @(posedge clk) begin
    if (rd_req_valid && rd_req_ready) begin
        ar_valid_reg <= 1'b1;
        ar_id_reg <= rd_req_tag;
        ar_addr_reg <= rd_req_addr[ADDR_WIDTH-1:0];
        ar_len_reg <= burst_len(rd_req_addr, rd_req_len);
    end else if (m_axi_arready) begin
        ar_valid_reg <= 1'b0;
    end
    if (wr_req_valid && wr_req_ready) begin
        aw_valid_reg <= 1'b1;
        aw_addr_reg <= wr_req_addr[ADDR_WIDTH-1:0];
        aw_len_reg <= burst_len(wr_req_addr, wr_req_len);
    end else if (m_axi_awready) begin
        aw_valid_reg <= 1'b0;
    end
    if (rst) begin
        ar_valid_reg <= 1'b0;
        aw_valid_reg <= 1'b0;
    end
end

assign m_axi_arid = ar_id_reg;
assign m_axi_araddr = ar_addr_reg;
assign m_axi_arlen = ar_len_reg;
assign m_axi_arsize = LINE_SHIFT[2:0];
assign m_axi_arburst = 2'b01;
assign m_axi_arvalid = ar_valid_reg;

assign rd_cpl_valid = m_axi_rvalid;
assign rd_cpl_tag = m_axi_rid;
assign rd_cpl_data = m_axi_rdata;
assign rd_cpl_last = m_axi_rlast;
assign rd_cpl_err = m_axi_rresp[1];
assign m_axi_rready = rd_cpl_ready;

assign m_axi_awid = {TAG_WIDTH{1'b0}};
assign m_axi_awaddr = aw_addr_reg;
assign m_axi_awlen = aw_len_reg;
assign m_axi_awsize = LINE_SHIFT[2:0];
assign m_axi_awburst = 2'b01;
assign m_axi_awvalid = aw_valid_reg;

assign m_axi_wdata = wr_dat_data;
assign m_axi_wstrb = wr_dat_strb;
assign m_axi_wlast = wr_dat_last;
assign m_axi_wvalid = wr_dat_valid;
assign wr_dat_ready = m_axi_wready;

assign wr_cpl_valid = m_axi_bvalid;
assign wr_cpl_err = m_axi_bresp[1];
assign m_axi_bready = 1'b1;

// Addresses above ADDR_WIDTH never reach this port (the engine checks them); the B ID is 0.
wire unused_ok = &{1'b0, rd_req_addr[63:ADDR_WIDTH > 63 ? 63 : ADDR_WIDTH], m_axi_bid,
                   wr_req_addr[63:ADDR_WIDTH > 63 ? 63 : ADDR_WIDTH], m_axi_rresp[0],
                   m_axi_bresp[0]};

endmodule

`resetall
