`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "pcie_cfg.vh"
`include "card_regs.vh"

// PCIe completer bridge: memory requests from the hard IP's completer request stream (CQ,
// 512-bit, DWORD-aligned) become BAR accesses; reads are answered on the completer completion
// stream (CC). One request at a time, in the card clock domain.
//   BAR_REGS, offsets below the register block's size: an AXI4-Lite access of csr (BAR0 MMIO)
//   BAR_MSIX, the table and the PBA: pcie_msix's register port
//   anything else: a read completes Unsupported Request, a write is dropped
// Only one-DWORD accesses are served (the driver's MMIO is 32-bit); a longer read completes
// Completer Abort and a longer write is dropped.
module pcie_cq_bridge #(
    parameter integer DATA_WIDTH = 512       // stream width
) (
    input  wire                  clk,
    input  wire                  rst,

    input  wire [DATA_WIDTH-1:0] s_axis_cq_tdata,
    input  wire [3:0]            s_axis_cq_first_be,
    input  wire                  s_axis_cq_tlast,
    input  wire                  s_axis_cq_tvalid,
    output wire                  s_axis_cq_tready,

    output wire [DATA_WIDTH-1:0] m_axis_cc_tdata,
    output wire [DATA_WIDTH/32-1:0] m_axis_cc_tkeep,
    output wire                  m_axis_cc_tlast,
    output wire                  m_axis_cc_tvalid,
    input  wire                  m_axis_cc_tready,

    // AXI4-Lite master (csr)
    output wire [11:0]           m_axil_awaddr,
    output wire                  m_axil_awvalid,
    input  wire                  m_axil_awready,
    output wire [31:0]           m_axil_wdata,
    output wire [3:0]            m_axil_wstrb,
    output wire                  m_axil_wvalid,
    input  wire                  m_axil_wready,
    input  wire [1:0]            m_axil_bresp,
    input  wire                  m_axil_bvalid,
    output wire                  m_axil_bready,
    output wire [11:0]           m_axil_araddr,
    output wire                  m_axil_arvalid,
    input  wire                  m_axil_arready,
    input  wire [31:0]           m_axil_rdata,
    input  wire [1:0]            m_axil_rresp,
    input  wire                  m_axil_rvalid,
    output wire                  m_axil_rready,

    // MSI-X table / PBA
    output wire                  msix_wr,
    output wire [11:0]           msix_waddr,
    output wire [31:0]           msix_wdata,
    output wire [3:0]            msix_wstrb,
    output wire [11:0]           msix_raddr,
    input  wire [31:0]           msix_rdata,
    input  wire                  msix_rhit,

    // counters for tests and waveforms: unsupported requests answered / writes dropped
    output reg  [15:0]           stat_unsupported
);

localparam [3:0] REQ_MEM_READ = 4'd0, REQ_MEM_WRITE = 4'd1;
localparam [2:0] CPL_SC = 3'd0, CPL_UR = 3'd1, CPL_CA = 3'd4;
localparam [2:0] S_IDLE = 3'd0, S_AXIL_W = 3'd1, S_AXIL_B = 3'd2, S_AXIL_AR = 3'd3,
                 S_AXIL_R = 3'd4, S_CPL = 3'd5, S_DRAIN = 3'd6;

reg [2:0]  state;
reg [63:0] r_addr;
reg [10:0] r_dwords;
reg [15:0] r_req_id;
reg [7:0]  r_tag, r_func;
reg [2:0]  r_bar, r_tc, r_attr;
reg [3:0]  r_be;
reg [31:0] r_wdata;
reg        r_read;
reg [2:0]  c_status;
reg [31:0] c_data;
reg        aw_done, w_done;

wire [DATA_WIDTH-1:0] cq = s_axis_cq_tdata;
wire [3:0]  h_req_type = cq[78:75];
wire        h_read = h_req_type == REQ_MEM_READ;
wire        h_write = h_req_type == REQ_MEM_WRITE;

// BAR decode of the latched request
wire [11:0] off12 = r_addr[11:0];
wire        regs_hit = r_bar == `PCIE_BAR_REGS
                       && r_addr[`PCIE_BAR_REGS_BITS-1:`BAR0_ADDR_WIDTH] == 0;
wire        msix_bar = r_bar == `PCIE_BAR_MSIX;
wire        one_dw = r_dwords == 11'd1;

assign s_axis_cq_tready = state == S_IDLE || state == S_DRAIN;

always @(posedge clk) begin
    case (state)
        S_IDLE: if (s_axis_cq_tvalid) begin
            r_addr <= {cq[63:2], 2'b00};
            r_dwords <= cq[74:64];
            r_req_id <= cq[95:80];
            r_tag <= cq[103:96];
            r_func <= cq[111:104];
            r_bar <= cq[114:112];
            r_tc <= cq[123:121];
            r_attr <= cq[126:124];
            r_be <= s_axis_cq_first_be;
            r_wdata <= cq[159:128];
            r_read <= h_read;
            state <= !s_axis_cq_tlast ? S_DRAIN
                   : (h_read || h_write) ? S_AXIL_W : S_IDLE;
            if (!(h_read || h_write)) stat_unsupported <= stat_unsupported + 16'd1;
            aw_done <= 1'b0;
            w_done <= 1'b0;
        end
        // a multi-beat request (more than 12 DWORDs of write data) is dropped whole
        S_DRAIN: if (s_axis_cq_tvalid && s_axis_cq_tlast) begin
            state <= r_read ? S_CPL : S_IDLE;
            c_status <= CPL_CA;
            stat_unsupported <= stat_unsupported + 16'd1;
        end
        S_AXIL_W: begin
            // decode: the first cycle after the request
            if (r_read) begin
                if (!one_dw) begin
                    c_status <= CPL_CA;
                    state <= S_CPL;
                    stat_unsupported <= stat_unsupported + 16'd1;
                end else if (regs_hit) begin
                    state <= S_AXIL_AR;
                end else if (msix_bar && msix_rhit) begin
                    c_status <= CPL_SC;
                    c_data <= msix_rdata;
                    state <= S_CPL;
                end else begin
                    c_status <= CPL_UR;
                    state <= S_CPL;
                    stat_unsupported <= stat_unsupported + 16'd1;
                end
            end else if (one_dw && regs_hit) begin
                state <= S_AXIL_B;
            end else begin
                // table writes take effect now (msix_wr); everything else is dropped
                if (!(one_dw && msix_bar && off12 < `PCIE_MSIX_PBA_OFFSET))
                    stat_unsupported <= stat_unsupported + 16'd1;
                state <= S_IDLE;
            end
        end
        S_AXIL_B: begin
            if (m_axil_awready) aw_done <= 1'b1;
            if (m_axil_wready) w_done <= 1'b1;
            if (m_axil_bvalid) state <= S_IDLE;
        end
        S_AXIL_AR: if (m_axil_arready) state <= S_AXIL_R;
        S_AXIL_R: if (m_axil_rvalid) begin
            c_data <= m_axil_rdata;
            c_status <= m_axil_rresp[1] ? CPL_CA : CPL_SC;
            state <= S_CPL;
        end
        S_CPL: if (m_axis_cc_tready) state <= S_IDLE;
        default: state <= S_IDLE;
    endcase
    if (rst) begin
        state <= S_IDLE;
        stat_unsupported <= 16'd0;
        aw_done <= 1'b0;
        w_done <= 1'b0;
    end
end

assign msix_wr = state == S_AXIL_W && !r_read && one_dw && msix_bar
                 && off12 < `PCIE_MSIX_PBA_OFFSET;
assign msix_waddr = off12;
assign msix_wdata = r_wdata;
assign msix_wstrb = r_be;
assign msix_raddr = off12;

assign m_axil_awaddr = off12;
assign m_axil_awvalid = state == S_AXIL_B && !aw_done;
assign m_axil_wdata = r_wdata;
assign m_axil_wstrb = r_be;
assign m_axil_wvalid = state == S_AXIL_B && !w_done;
assign m_axil_bready = state == S_AXIL_B;
assign m_axil_araddr = off12;
assign m_axil_arvalid = state == S_AXIL_AR;
assign m_axil_rready = state == S_AXIL_R;

// Completion: byte count and lower address from the first byte enables (a one-DWORD read)
reg [1:0] be_off;
reg [2:0] be_count;
always @* begin
    casez (r_be)
        4'b???1: be_off = 2'd0;
        4'b??10: be_off = 2'd1;
        4'b?100: be_off = 2'd2;
        default: be_off = 2'd3;
    endcase
    casez (r_be)
        4'b1??1: be_count = 3'd4;
        4'b01?1, 4'b1?10: be_count = 3'd3;
        4'b0011, 4'b0110, 4'b1100: be_count = 3'd2;
        default: be_count = 3'd1;
    endcase
end
wire        c_data_ok = c_status == CPL_SC;
wire [12:0] c_bytes = c_data_ok ? {10'd0, be_count} : 13'd0;
wire [10:0] c_dwords = c_data_ok ? 11'd1 : 11'd0;
assign m_axis_cc_tdata = {{DATA_WIDTH-128{1'b0}}, c_data,
                          1'b0, r_attr, r_tc, 1'b0, 16'd0, r_tag,                  // DW2
                          r_req_id, 1'b0, 1'b0, c_status, c_dwords,                // DW1
                          3'd0, c_bytes, 6'd0, 2'b00, 1'b0, off12[6:2], be_off};   // DW0
assign m_axis_cc_tkeep = c_data_ok ? 16'h000F : 16'h0007;
assign m_axis_cc_tlast = 1'b1;
assign m_axis_cc_tvalid = state == S_CPL;

// requester and completer IDs: the hard IP fills in the completer; responses of csr are OKAY
wire unused_ok = &{1'b0, r_func, m_axil_bresp, m_axil_rresp[0], cq[79], cq[DATA_WIDTH-1:160], cq[127], cq[120:115],
                   cq[1:0], r_addr[63:12]};

endmodule

`resetall
