`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "card_regs.vh"

// BAR0 register block: an AXI4-Lite slave (32-bit data) holding the card's identity, the DMA
// channel registers, the interrupt status and mask, and the performance counters. The map is
// generated from pyhost/spec/regs.py (card_regs.vh, docs/registers.md). The accelerator's
// window (ACC_* registers) is forwarded to rtl/accel. Reads of unmapped offsets return 0 and
// writes to them are ignored; both answer OKAY. One read and one write are handled at a time; a
// write takes AW and W together.
module csr #(
    parameter [63:0]  MEM_SIZE = 64'd1073741824,   // card memory bytes (reported)
    parameter integer DATA_WIDTH = 512,            // card data bus width (reported)
    parameter integer ACCEL = 0                    // 1 when an accelerator is present
) (
    input  wire                 clk,
    input  wire                 rst,

    // AXI4-Lite slave (BAR0)
    input  wire [11:0]          s_axil_awaddr,
    input  wire                 s_axil_awvalid,
    output wire                 s_axil_awready,
    input  wire [31:0]          s_axil_wdata,
    input  wire [3:0]           s_axil_wstrb,
    input  wire                 s_axil_wvalid,
    output wire                 s_axil_wready,
    output wire [1:0]           s_axil_bresp,
    output wire                 s_axil_bvalid,
    input  wire                 s_axil_bready,
    input  wire [11:0]          s_axil_araddr,
    input  wire                 s_axil_arvalid,
    output wire                 s_axil_arready,
    output wire [31:0]          s_axil_rdata,
    output wire [1:0]           s_axil_rresp,
    output wire                 s_axil_rvalid,
    input  wire                 s_axil_rready,

    // DMA engine
    output wire [3*64-1:0]      ch_desc_addr,
    output wire [3*64-1:0]      ch_wb_addr,
    output wire [2:0]           ch_run,
    output wire [2:0]           ch_reset,
    output wire [12:0]          cfg_mps,
    output wire [12:0]          cfg_mrrs,
    output wire [7:0]           cfg_tags,
    input  wire [2:0]           ch_busy,
    input  wire [2:0]           ch_done,
    input  wire [2:0]           ch_error,
    input  wire [3*8-1:0]       ch_err_code,
    input  wire [3*32-1:0]      ch_completed,
    input  wire [3*64-1:0]      ch_bytes,
    input  wire [3*32-1:0]      ch_descs,
    input  wire [2:0]           irq_done,
    input  wire [2:0]           irq_err,

    // DRAM controller counters, in the order of pyhost/spec/regs.py DRAM_COUNTERS
    input  wire [8*64-1:0]      dram_counters,

    // accelerator register window [ACCEL_BASE, ACCEL_END): writes are forwarded as one-cycle
    // pulses, reads as a combinational lookup in the cycle acc_reg_re is high (the read's AR
    // handshake; tie acc_reg_rdata to 0 without an accelerator)
    output wire                 acc_reg_wr,
    output wire [11:0]          acc_reg_waddr,
    output wire [31:0]          acc_reg_wdata,
    output wire [3:0]           acc_reg_wstrb,
    output wire [11:0]          acc_reg_raddr,
    output wire                 acc_reg_re,
    input  wire [31:0]          acc_reg_rdata,
    input  wire                 acc_irq_done,
    input  wire                 acc_irq_err,

    output wire                 irq,
    // IRQ_STATUS & IRQ_MASK, bit per source (the MSI-X vectors of card_top_pcie)
    output wire [2*`DMA_CHANNELS+1:0] irq_vec
);

localparam integer NCH = `DMA_CHANNELS;
localparam integer IRQ_BITS = 2 * NCH + 2;          // + ACCEL_DONE, ACCEL_ERR

reg [31:0]  scratch;
reg [IRQ_BITS-1:0] irq_status, irq_mask;
reg [12:0]  mps, mrrs;
reg [7:0]   tags;
reg [63:0]  desc_addr [0:NCH-1];
reg [63:0]  wb_addr [0:NCH-1];
reg [NCH-1:0] run_pulse, reset_pulse;

reg         bvalid_reg, rvalid_reg;
reg [31:0]  rdata_reg;

integer i;

// --- writes: AW and W together, B the cycle after
wire wr_take = s_axil_awvalid && s_axil_wvalid && (!bvalid_reg || s_axil_bready);
assign s_axil_awready = wr_take;
assign s_axil_wready = wr_take;
assign s_axil_bvalid = bvalid_reg;
assign s_axil_bresp = 2'b00;

// Byte-masked update of a 32-bit register.
function [31:0] merge;
    input [31:0] old;
    input [31:0] data;
    input [3:0]  strb;
    integer b;
    begin
        for (b = 0; b < 4; b = b + 1)
            merge[b*8 +: 8] = strb[b] ? data[b*8 +: 8] : old[b*8 +: 8];
    end
endfunction

wire [31:0] wmask = {{8{s_axil_wstrb[3]}}, {8{s_axil_wstrb[2]}}, {8{s_axil_wstrb[1]}},
                     {8{s_axil_wstrb[0]}}};
localparam [11:0] CH_END = `DMA_CH_BASE + NCH[11:0] * `DMA_CH_STRIDE;
wire [11:0] waddr = {s_axil_awaddr[11:2], 2'b00};
wire        wch_hit = waddr >= `DMA_CH_BASE && waddr < CH_END;
wire [11:0] wch_full = waddr - `DMA_CH_BASE;
wire [7:0]  wch_off = wch_full[7:0];              // 3 blocks of 0x40 fit in 8 bits
wire [1:0]  wch = wch_off[7:6];
wire [5:0]  wreg = wch_off[5:0];

reg [IRQ_BITS-1:0] irq_set;
always @* begin
    for (i = 0; i < NCH; i = i + 1) begin
        irq_set[2*i] = irq_done[i];
        irq_set[2*i+1] = irq_err[i];
    end
    irq_set[`IRQ_STATUS_ACCEL_DONE_LSB] = acc_irq_done && ACCEL != 0;
    irq_set[`IRQ_STATUS_ACCEL_ERR_LSB] = acc_irq_err && ACCEL != 0;
end
wire [IRQ_BITS-1:0] irq_clear = (wr_take && waddr == `REG_IRQ_STATUS)
                                ? s_axil_wdata[IRQ_BITS-1:0] & wmask[IRQ_BITS-1:0]
                                : {IRQ_BITS{1'b0}};
integer k;

always @(posedge clk) begin
    run_pulse <= {NCH{1'b0}};
    reset_pulse <= {NCH{1'b0}};
    if (bvalid_reg && s_axil_bready) bvalid_reg <= 1'b0;
    // events set status bits, software clears them (W1C); an event wins over a clear
    irq_status <= (irq_status & ~irq_clear) | irq_set;
    if (wr_take) begin
        bvalid_reg <= 1'b1;
        case (waddr)
            `REG_SCRATCH: scratch <= merge(scratch, s_axil_wdata, s_axil_wstrb);
            `REG_IRQ_MASK: irq_mask <= (irq_mask & ~wmask[IRQ_BITS-1:0])
                                       | (s_axil_wdata[IRQ_BITS-1:0] & wmask[IRQ_BITS-1:0]);
            `REG_DMA_MPS: mps <= s_axil_wdata[12:0];
            `REG_DMA_MRRS: mrrs <= s_axil_wdata[12:0];
            `REG_DMA_TAGS: tags <= s_axil_wdata[7:0];
            default: ;
        endcase
        if (wch_hit) begin
            case (wreg)
                `CH_CTRL: begin
                    run_pulse[wch] <= s_axil_wdata[`CH_CTRL_RUN_LSB] && s_axil_wstrb[0];
                    reset_pulse[wch] <= s_axil_wdata[`CH_CTRL_RESET_LSB] && s_axil_wstrb[0];
                end
                `CH_DESC_LO: desc_addr[wch][31:0] <= merge(desc_addr[wch][31:0], s_axil_wdata,
                                                           s_axil_wstrb);
                `CH_DESC_HI: desc_addr[wch][63:32] <= merge(desc_addr[wch][63:32], s_axil_wdata,
                                                            s_axil_wstrb);
                `CH_WB_LO: wb_addr[wch][31:0] <= merge(wb_addr[wch][31:0], s_axil_wdata,
                                                       s_axil_wstrb);
                `CH_WB_HI: wb_addr[wch][63:32] <= merge(wb_addr[wch][63:32], s_axil_wdata,
                                                        s_axil_wstrb);
                default: ;
            endcase
        end
    end
    if (rst) begin
        bvalid_reg <= 1'b0;
        scratch <= 32'd0;
        irq_status <= {IRQ_BITS{1'b0}};
        irq_mask <= {IRQ_BITS{1'b0}};
        mps <= `DMA_DEFAULT_MPS;
        mrrs <= `DMA_DEFAULT_MRRS;
        tags <= `DMA_DEFAULT_TAGS;
        for (k = 0; k < NCH; k = k + 1) begin
            desc_addr[k] <= 64'd0;
            wb_addr[k] <= 64'd0;
        end
        run_pulse <= {NCH{1'b0}};
        reset_pulse <= {NCH{1'b0}};
    end
end

// --- reads: AR, then R the cycle after
wire rd_take = s_axil_arvalid && (!rvalid_reg || s_axil_rready);
assign s_axil_arready = rd_take;
assign s_axil_rvalid = rvalid_reg;
assign s_axil_rdata = rdata_reg;
assign s_axil_rresp = 2'b00;

wire [11:0] raddr = {s_axil_araddr[11:2], 2'b00};
wire        rch_hit = raddr >= `DMA_CH_BASE && raddr < CH_END;
wire [11:0] rch_full = raddr - `DMA_CH_BASE;
wire [7:0]  rch_off = rch_full[7:0];
wire [1:0]  rch = rch_off[7:6];
wire [5:0]  rreg = rch_off[5:0];
wire        rdram_hit = raddr >= `REG_DRAM_RD_LO && raddr < `REG_DRAM_RD_LO + 12'd64;
wire [3:0]  rdram_word = raddr[5:2];               // the counters are 64-byte aligned

// The read data, looked up in the cycle of the read (rdata_reg takes it then): the lookup is not
// evaluated for every change of the address bus.
reg [31:0] rmux;
always @* begin
    rmux = 32'd0;
    if (rd_take) begin
    case (raddr)
        `REG_CARD_ID: rmux = `CARD_ID;
        `REG_VERSION: rmux = `CARD_VERSION;
        `REG_MEM_SIZE_LO: rmux = MEM_SIZE[31:0];
        `REG_MEM_SIZE_HI: rmux = MEM_SIZE[63:32];
        `REG_BUS_WIDTH: rmux = DATA_WIDTH;
        `REG_SCRATCH: rmux = scratch;
        `REG_CAPS: begin
            rmux[`CAPS_CHANNELS_LSB +: `CAPS_CHANNELS_WIDTH] = NCH[`CAPS_CHANNELS_WIDTH-1:0];
            rmux[`CAPS_TAGS_LSB +: `CAPS_TAGS_WIDTH] = `DMA_MAX_TAGS;
            rmux[`CAPS_ACCEL_LSB] = ACCEL != 0;
        end
        `REG_IRQ_STATUS: rmux[IRQ_BITS-1:0] = irq_status;
        `REG_IRQ_MASK: rmux[IRQ_BITS-1:0] = irq_mask;
        `REG_DMA_MPS: rmux[12:0] = mps;
        `REG_DMA_MRRS: rmux[12:0] = mrrs;
        `REG_DMA_TAGS: rmux[7:0] = tags;
        default: ;
    endcase
    if (rch_hit) begin
        case (rreg)
            `CH_STATUS: begin
                rmux[`CH_STATUS_BUSY_LSB] = ch_busy[rch];
                rmux[`CH_STATUS_DONE_LSB] = ch_done[rch];
                rmux[`CH_STATUS_ERROR_LSB] = ch_error[rch];
                rmux[`CH_STATUS_ERR_CODE_LSB +: 8] = ch_err_code[rch*8 +: 8];
            end
            `CH_DESC_LO: rmux = desc_addr[rch][31:0];
            `CH_DESC_HI: rmux = desc_addr[rch][63:32];
            `CH_COMPLETED: rmux = ch_completed[rch*32 +: 32];
            `CH_WB_LO: rmux = wb_addr[rch][31:0];
            `CH_WB_HI: rmux = wb_addr[rch][63:32];
            `CH_BYTES_LO: rmux = ch_bytes[rch*64 +: 32];
            `CH_BYTES_HI: rmux = ch_bytes[rch*64 + 32 +: 32];
            `CH_DESCS: rmux = ch_descs[rch*32 +: 32];
            default: ;
        endcase
    end
    if (rdram_hit)
        rmux = dram_counters[rdram_word*32 +: 32];
    if (acc_rhit && ACCEL != 0)
        rmux = acc_reg_rdata;
    end
end

always @(posedge clk) begin
    if (rvalid_reg && s_axil_rready) rvalid_reg <= 1'b0;
    if (rd_take) begin
        rvalid_reg <= 1'b1;
        rdata_reg <= rmux;
    end
    if (rst) rvalid_reg <= 1'b0;
end

genvar g;
generate for (g = 0; g < NCH; g = g + 1) begin : g_ch
    assign ch_desc_addr[g*64 +: 64] = desc_addr[g];
    assign ch_wb_addr[g*64 +: 64] = wb_addr[g];
end endgenerate
assign ch_run = run_pulse;
assign ch_reset = reset_pulse;
assign cfg_mps = mps;
assign cfg_mrrs = mrrs;
assign cfg_tags = tags;
assign irq = |(irq_status & irq_mask);
assign irq_vec = irq_status & irq_mask;

wire acc_whit = waddr >= `ACCEL_BASE && waddr < `ACCEL_END;
wire acc_rhit = raddr >= `ACCEL_BASE && raddr < `ACCEL_END;
assign acc_reg_wr = wr_take && acc_whit && ACCEL != 0;
assign acc_reg_waddr = waddr;
assign acc_reg_wdata = s_axil_wdata;
assign acc_reg_wstrb = s_axil_wstrb;
assign acc_reg_raddr = raddr;
assign acc_reg_re = rd_take && acc_rhit && ACCEL != 0;

// AXI4-Lite protection bits are not ports; the low address bits select bytes only.
wire unused_ok = &{1'b0, s_axil_awaddr[1:0], s_axil_araddr[1:0], wmask[31:IRQ_BITS],
                   wch_full[11:8], rch_full[11:8]};

endmodule

`resetall
