`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "pcie_cfg.vh"

// MSI-X: the vector table and pending-bit array (PCIe 3.0 section 6.8.2) behind a register
// port of the completer bridge, and the messages. Vector i is source bit i (IRQ_STATUS &
// IRQ_MASK, pyhost/spec/pcie.py): a rising source sets its pending bit; a pending vector whose
// entry is unmasked, while MSI-X is enabled and the function is not masked, is sent (a memory
// write of the entry's data to its address, by the requester adapter) and its pending bit
// cleared. Vector control's mask bit resets to 1, as the specification requires.
module pcie_msix #(
    parameter integer VECTORS = `PCIE_MSIX_VECTORS   // table entries (<= 32)
) (
    input  wire                clk,
    input  wire                rst,

    input  wire [VECTORS-1:0]  source,         // level per vector
    input  wire                msix_enable,    // MSI-X Enable (Message Control), synchronised
    input  wire                function_mask,  // Function Mask (Message Control), synchronised

    // table / PBA registers (BAR offsets, 32-bit)
    input  wire                reg_wr,
    input  wire [11:0]         reg_waddr,
    input  wire [31:0]         reg_wdata,
    input  wire [3:0]          reg_wstrb,
    input  wire [11:0]         reg_raddr,
    output reg  [31:0]         reg_rdata,
    output wire                reg_rhit,       // the read offset is the table or the PBA

    // message to the requester adapter
    output wire                msg_valid,
    input  wire                msg_ready,
    output wire [63:0]         msg_addr,
    output wire [31:0]         msg_data
);

localparam integer VB = VECTORS > 1 ? $clog2(VECTORS) : 1;
localparam [11:0] TABLE_SIZE = VECTORS[11:0] * 12'd16;

initial begin
    if (VECTORS < 1 || VECTORS > 32)
        $fatal(1, "pcie_msix: VECTORS must be 1..32, got %0d", VECTORS);
end

reg [31:0] addr_lo [0:VECTORS-1];
reg [31:0] addr_hi [0:VECTORS-1];
reg [31:0] data    [0:VECTORS-1];
reg [VECTORS-1:0] mask;
reg [VECTORS-1:0] pending;
reg [VECTORS-1:0] source_d;

function [31:0] merge;
    input [31:0] old;
    input [31:0] d;
    input [3:0]  strb;
    integer b;
    begin
        for (b = 0; b < 4; b = b + 1)
            merge[b*8 +: 8] = strb[b] ? d[b*8 +: 8] : old[b*8 +: 8];
    end
endfunction

wire [11:0] w_off = reg_waddr - `PCIE_MSIX_TABLE_OFFSET;       // wraps below the table
wire        w_table = w_off < TABLE_SIZE;
wire [VB-1:0] w_vec = w_off[4 +: VB];
wire        r_pba = reg_raddr == `PCIE_MSIX_PBA_OFFSET || reg_raddr == `PCIE_MSIX_PBA_OFFSET + 12'd4;
wire [11:0] r_off = reg_raddr - `PCIE_MSIX_TABLE_OFFSET;
wire        r_table = r_off < TABLE_SIZE;
wire [VB-1:0] r_vec = r_off[4 +: VB];
assign reg_rhit = r_table || r_pba;

always @* begin
    reg_rdata = 32'd0;
    if (r_table) begin
        case (r_off[3:2])
            2'd0: reg_rdata = addr_lo[r_vec];
            2'd1: reg_rdata = addr_hi[r_vec];
            2'd2: reg_rdata = data[r_vec];
            default: reg_rdata = {31'd0, mask[r_vec]};
        endcase
    end else if (reg_raddr == `PCIE_MSIX_PBA_OFFSET) begin
        reg_rdata[VECTORS-1:0] = pending;
    end
end

// The lowest pending, unmasked vector is sent; its message is held until the adapter takes it.
reg           sel_valid;
reg [VB-1:0]  sel;
integer i;
always @* begin
    sel_valid = 1'b0;
    sel = {VB{1'b0}};
    for (i = VECTORS - 1; i >= 0; i = i - 1) begin
        if (pending[i] && !mask[i]) begin
            sel_valid = 1'b1;
            sel = i[VB-1:0];
        end
    end
end

reg           m_valid;
reg [VB-1:0]  m_vec;
reg [63:0]    m_addr;
reg [31:0]    m_data;
assign msg_valid = m_valid;
assign msg_addr = m_addr;
assign msg_data = m_data;

wire [VECTORS-1:0] rise = source & ~source_d;

integer k;
always @(posedge clk) begin
    source_d <= source;
    pending <= pending | rise;
    if (msg_valid && msg_ready) m_valid <= 1'b0;
    if (!m_valid && sel_valid && msix_enable && !function_mask) begin
        m_valid <= 1'b1;
        m_vec <= sel;
        m_addr <= {addr_hi[sel], addr_lo[sel][31:2], 2'b00};
        m_data <= data[sel];
        pending[sel] <= rise[sel];   // a new rise in the cycle its message goes stays pending
    end
    if (reg_wr && w_table) begin
        case (w_off[3:2])
            2'd0: addr_lo[w_vec] <= merge(addr_lo[w_vec], reg_wdata, reg_wstrb);
            2'd1: addr_hi[w_vec] <= merge(addr_hi[w_vec], reg_wdata, reg_wstrb);
            2'd2: data[w_vec] <= merge(data[w_vec], reg_wdata, reg_wstrb);
            default: if (reg_wstrb[0]) mask[w_vec] <= reg_wdata[0];
        endcase
    end
    if (rst) begin
        source_d <= {VECTORS{1'b0}};
        pending <= {VECTORS{1'b0}};
        mask <= {VECTORS{1'b1}};
        m_valid <= 1'b0;
        for (k = 0; k < VECTORS; k = k + 1) begin
            addr_lo[k] <= 32'd0;
            addr_hi[k] <= 32'd0;
            data[k] <= 32'd0;
        end
    end
end

// the PBA's second word reads 0 (at most 32 vectors); m_vec is kept for waveforms
wire unused_ok = &{1'b0, m_vec, w_off[11:4+VB], r_off[11:4+VB], w_off[1:0], r_off[1:0]};

endmodule

`resetall
