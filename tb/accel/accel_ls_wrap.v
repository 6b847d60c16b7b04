`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_cfg.vh"

// Bench wrapper for accel_load and accel_store: both units on one AXI4 master (the load unit has
// the read channels, the store unit the write channels; IDs 0, full-width INCR bursts as the top
// sets them) and an ACC scratchpad that the load unit writes and the store unit reads
// (synchronous read, as in the top). Reset sets ACC to a pattern the bench knows: lane j of
// row i = i * 0x9E3779B1 ^ (j + 1) * 0x85EBCA77 (32-bit arithmetic). The load unit's write ports
// are outputs, so the bench sees every scratchpad write.
module accel_ls_wrap #(
    parameter integer N = `ACCEL_N,                                 // GEMM array size
    parameter integer INP_DEPTH = `ACCEL_INP_DEPTH,                 // INP scratchpad rows
    parameter integer WGT_DEPTH = `ACCEL_WGT_DEPTH,                 // WGT scratchpad rows
    parameter integer ACC_DEPTH = `ACCEL_ACC_DEPTH,                 // ACC scratchpad rows
    parameter integer DATA_WIDTH = `ACCEL_DATA_WIDTH,               // card AXI data width
    parameter integer ADDR_WIDTH = 32,                              // card AXI address width
    parameter integer MAX_BURST = `ACCEL_MEM_MAX_BURST,             // longest burst (beats)
    parameter integer MAX_OUTSTANDING = `ACCEL_MEM_MAX_OUTSTANDING  // bursts in flight per unit
) (
    input  wire                     clk,
    input  wire                     rst,
    input  wire                     stop,
    input  wire [16*32-1:0]         slots,

    // load unit
    input  wire                     ld_insn_valid,
    input  wire [127:0]             ld_insn,
    input  wire [31:0]              ld_insn_pc,
    output wire                     ld_insn_ready,
    input  wire                     ld_tok_prev_avail,
    input  wire                     ld_tok_next_avail,
    output wire                     ld_tok_pop_prev,
    output wire                     ld_tok_pop_next,
    output wire                     ld_tok_push_prev,
    output wire                     ld_tok_push_next,
    output wire                     ld_idle,
    output wire                     ld_waiting,
    output wire                     ld_busy,
    output wire                     ld_err,
    output wire [7:0]               ld_err_code,
    output wire [31:0]              ld_err_pc,
    output wire                     ld_bytes_valid,
    output wire [31:0]              ld_bytes,
    output wire                     inp_we,
    output wire [$clog2(INP_DEPTH)-1:0] inp_waddr,
    output wire [8*N-1:0]           inp_wdata,
    output wire                     inp_wtr,
    output wire [(N > 1 ? $clog2(N) : 1)-1:0] inp_wlane,
    output wire                     wgt_we,
    output wire [$clog2(WGT_DEPTH)-1:0] wgt_waddr,
    output wire [8*N*N-1:0]         wgt_wdata,
    output wire                     acc_we,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_waddr,
    output wire [32*N-1:0]          acc_wdata,

    // store unit
    input  wire                     st_insn_valid,
    input  wire [127:0]             st_insn,
    input  wire [31:0]              st_insn_pc,
    output wire                     st_insn_ready,
    input  wire                     st_tok_prev_avail,
    input  wire                     st_tok_next_avail,
    output wire                     st_tok_pop_prev,
    output wire                     st_tok_pop_next,
    output wire                     st_tok_push_prev,
    output wire                     st_tok_push_next,
    output wire                     st_idle,
    output wire                     st_waiting,
    output wire                     st_busy,
    output wire                     st_err,
    output wire [7:0]               st_err_code,
    output wire [31:0]              st_err_pc,
    output wire                     st_bytes_valid,
    output wire [31:0]              st_bytes,
    output wire                     acc_re,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_raddr,

    // AXI4 master
    output wire [0:0]               m_axi_awid,
    output wire [ADDR_WIDTH-1:0]    m_axi_awaddr,
    output wire [7:0]               m_axi_awlen,
    output wire [2:0]               m_axi_awsize,
    output wire [1:0]               m_axi_awburst,
    output wire                     m_axi_awvalid,
    input  wire                     m_axi_awready,
    output wire [DATA_WIDTH-1:0]    m_axi_wdata,
    output wire [DATA_WIDTH/8-1:0]  m_axi_wstrb,
    output wire                     m_axi_wlast,
    output wire                     m_axi_wvalid,
    input  wire                     m_axi_wready,
    input  wire [0:0]               m_axi_bid,
    input  wire [1:0]               m_axi_bresp,
    input  wire                     m_axi_bvalid,
    output wire                     m_axi_bready,
    output wire [0:0]               m_axi_arid,
    output wire [ADDR_WIDTH-1:0]    m_axi_araddr,
    output wire [7:0]               m_axi_arlen,
    output wire [2:0]               m_axi_arsize,
    output wire [1:0]               m_axi_arburst,
    output wire                     m_axi_arvalid,
    input  wire                     m_axi_arready,
    input  wire [0:0]               m_axi_rid,
    input  wire [DATA_WIDTH-1:0]    m_axi_rdata,
    input  wire [1:0]               m_axi_rresp,
    input  wire                     m_axi_rlast,
    input  wire                     m_axi_rvalid,
    output wire                     m_axi_rready
);

localparam integer ACC_AW = $clog2(ACC_DEPTH);
localparam integer AXS = $clog2(DATA_WIDTH / 8);
localparam [2:0] AXSIZE = AXS[2:0];

reg [32*N-1:0] acc_mem [0:ACC_DEPTH-1];
reg [32*N-1:0] acc_rdata;

// the known contents, restored by every reset so that each test starts from them
function [32*N-1:0] acc_pattern;
    input integer row;
    integer lane;
    begin
        for (lane = 0; lane < N; lane = lane + 1)
            acc_pattern[32*lane +: 32] = row * 32'h9E37_79B1 ^ (lane + 1) * 32'h85EB_CA77;
    end
endfunction

integer k;
always @(posedge clk) begin
    if (rst) begin
        for (k = 0; k < ACC_DEPTH; k = k + 1) acc_mem[k] <= acc_pattern(k);
    end else if (acc_we) begin
        acc_mem[acc_waddr] <= acc_wdata;
    end
    if (acc_re) acc_rdata <= acc_mem[acc_raddr];
end

accel_load #(
    .N(N), .INP_DEPTH(INP_DEPTH), .WGT_DEPTH(WGT_DEPTH), .ACC_DEPTH(ACC_DEPTH),
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(ADDR_WIDTH), .MAX_BURST(MAX_BURST),
    .MAX_OUTSTANDING(MAX_OUTSTANDING)
) load (
    .clk(clk), .rst(rst),
    .insn_valid(ld_insn_valid), .insn(ld_insn), .insn_pc(ld_insn_pc),
    .insn_ready(ld_insn_ready),
    .tok_prev_avail(ld_tok_prev_avail), .tok_next_avail(ld_tok_next_avail),
    .tok_pop_prev(ld_tok_pop_prev), .tok_pop_next(ld_tok_pop_next),
    .tok_push_prev(ld_tok_push_prev), .tok_push_next(ld_tok_push_next),
    .stop(stop), .idle(ld_idle), .waiting(ld_waiting), .busy(ld_busy),
    .err(ld_err), .err_code(ld_err_code), .err_pc(ld_err_pc),
    .slots(slots), .bytes_valid(ld_bytes_valid), .bytes(ld_bytes),
    .m_axi_araddr(m_axi_araddr), .m_axi_arlen(m_axi_arlen), .m_axi_arvalid(m_axi_arvalid),
    .m_axi_arready(m_axi_arready), .m_axi_rdata(m_axi_rdata), .m_axi_rresp(m_axi_rresp),
    .m_axi_rlast(m_axi_rlast), .m_axi_rvalid(m_axi_rvalid), .m_axi_rready(m_axi_rready),
    .inp_we(inp_we), .inp_waddr(inp_waddr), .inp_wdata(inp_wdata),
    .inp_wtr(inp_wtr), .inp_wlane(inp_wlane),
    .wgt_we(wgt_we), .wgt_waddr(wgt_waddr), .wgt_wdata(wgt_wdata),
    .acc_we(acc_we), .acc_waddr(acc_waddr), .acc_wdata(acc_wdata)
);

accel_store #(
    .N(N), .INP_DEPTH(INP_DEPTH), .WGT_DEPTH(WGT_DEPTH), .ACC_DEPTH(ACC_DEPTH),
    .DATA_WIDTH(DATA_WIDTH), .ADDR_WIDTH(ADDR_WIDTH), .MAX_BURST(MAX_BURST),
    .MAX_OUTSTANDING(MAX_OUTSTANDING)
) store (
    .clk(clk), .rst(rst),
    .insn_valid(st_insn_valid), .insn(st_insn), .insn_pc(st_insn_pc),
    .insn_ready(st_insn_ready),
    .tok_prev_avail(st_tok_prev_avail), .tok_next_avail(st_tok_next_avail),
    .tok_pop_prev(st_tok_pop_prev), .tok_pop_next(st_tok_pop_next),
    .tok_push_prev(st_tok_push_prev), .tok_push_next(st_tok_push_next),
    .stop(stop), .idle(st_idle), .waiting(st_waiting), .busy(st_busy),
    .err(st_err), .err_code(st_err_code), .err_pc(st_err_pc),
    .slots(slots), .bytes_valid(st_bytes_valid), .bytes(st_bytes),
    .acc_re(acc_re), .acc_raddr(acc_raddr), .acc_rdata(acc_rdata),
    .m_axi_awaddr(m_axi_awaddr), .m_axi_awlen(m_axi_awlen), .m_axi_awvalid(m_axi_awvalid),
    .m_axi_awready(m_axi_awready), .m_axi_wdata(m_axi_wdata), .m_axi_wstrb(m_axi_wstrb),
    .m_axi_wlast(m_axi_wlast), .m_axi_wvalid(m_axi_wvalid), .m_axi_wready(m_axi_wready),
    .m_axi_bresp(m_axi_bresp), .m_axi_bvalid(m_axi_bvalid), .m_axi_bready(m_axi_bready)
);

assign m_axi_awid = 1'b0;
assign m_axi_awsize = AXSIZE;
assign m_axi_awburst = 2'b01;
assign m_axi_arid = 1'b0;
assign m_axi_arsize = AXSIZE;
assign m_axi_arburst = 2'b01;

wire unused_ok = &{1'b0, m_axi_bid, m_axi_rid, ACC_AW[0]};

endmodule

`resetall
