`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"
`include "accel_cfg.vh"

// Decode of a MEM-format instruction (LOAD, STORE) for the load and store units (docs/isa.md):
// its fields, the element size, the (padded) tile geometry, the memory addresses and the checks
// of the start cycle (SP_RANGE, MISALIGNED). Combinational.
//
// STORE = 0 decodes a LOAD: padding applies and the buffer selects the element size and the
// scratchpad depth. STORE = 1 decodes a STORE as the store unit sees it (the fetch unit lets only
// ACC and ACC8 through, without padding): padding is ignored, anything but ACC8 is ACC.
module accel_mem_decode #(
    parameter integer N = `ACCEL_N,                  // GEMM array size (power of two)
    parameter integer INP_DEPTH = `ACCEL_INP_DEPTH,  // INP scratchpad rows
    parameter integer WGT_DEPTH = `ACCEL_WGT_DEPTH,  // WGT scratchpad rows
    parameter integer ACC_DEPTH = `ACCEL_ACC_DEPTH,  // ACC scratchpad rows
    parameter integer STORE = 0                      // 0: a LOAD, 1: a STORE (see above)
) (
    input  wire [127:0]                     insn,
    input  wire [16*32-1:0]                 slots,

    // fields
    output wire [1:0]                       buf_sel,
    output wire [`F_MEM_SP_BASE_W-1:0]      sp_base,
    output wire [`F_MEM_Y_SIZE_W-1:0]       y_size,
    output wire [`F_MEM_X_SIZE_W-1:0]       x_size,
    output wire [`F_MEM_PAD_TOP_W-1:0]      pad_top,
    output wire [`F_MEM_PAD_LEFT_W-1:0]     pad_left,
    output wire [`F_MEM_PAD_VALUE_W-1:0]    pad_value,

    // element size (log2 bytes) and the tile: rows x cols elements (with padding), total
    output wire [3:0]                       lg_e,
    output wire [`F_MEM_Y_SIZE_W:0]         rows,
    output wire [`F_MEM_X_SIZE_W:0]         cols,
    output wire [`F_MEM_Y_SIZE_W+`F_MEM_X_SIZE_W+1:0] total,

    // memory: first address, bytes of a memory row, row stride, bytes moved (memory elements)
    output wire [31:0]                      addr0,
    output wire [31:0]                      row_bytes,
    output wire [31:0]                      stride_bytes,
    output wire [31:0]                      moved_bytes,

    // start-cycle checks
    output wire                             range_bad,
    output wire                             align_bad
);

localparam integer LN = $clog2(N);
localparam [3:0]   LG_N = LN[3:0], LG_WGT = 2 * LN[3:0], LG_ACC = LN[3:0] + 4'd2;
localparam integer YW = `F_MEM_Y_SIZE_W;
localparam integer XW = `F_MEM_X_SIZE_W;
localparam integer PDW = `F_MEM_PAD_TOP_W;
localparam integer RW = YW + 1;                     // padded rows
localparam integer CLW = XW + 1;                    // padded columns
localparam integer TW = RW + CLW;                   // padded elements
localparam integer SBW = `F_MEM_SP_BASE_W;

initial begin
    if (N < 1 || (1 << LN) != N)
        $fatal(1, "accel_mem_decode: N must be a power of two, got %0d", N);
    if (STORE != 0 && STORE != 1) $fatal(1, "accel_mem_decode: STORE must be 0 or 1");
    if (YW + XW > 24) $fatal(1, "accel_mem_decode: tile sizes wider than 24 bits");
    if (PDW >= YW || PDW >= XW) $fatal(1, "accel_mem_decode: padding fields wider than sizes");
end

wire [3:0]     c_slot = insn[`F_MEM_SLOT_LSB +: `F_MEM_SLOT_W];
wire [31:0]    c_off = insn[`F_MEM_OFFSET_LSB +: `F_MEM_OFFSET_W];
wire [15:0]    c_stride = insn[`F_MEM_Y_STRIDE_LSB +: `F_MEM_Y_STRIDE_W];
wire [PDW-1:0] c_pt, c_pb, c_pl, c_pr;
generate if (STORE != 0) begin : g_store
    assign c_pt = {PDW{1'b0}};
    assign c_pb = {PDW{1'b0}};
    assign c_pl = {PDW{1'b0}};
    assign c_pr = {PDW{1'b0}};
end else begin : g_load
    assign c_pt = insn[`F_MEM_PAD_TOP_LSB +: `F_MEM_PAD_TOP_W];
    assign c_pb = insn[`F_MEM_PAD_BOTTOM_LSB +: `F_MEM_PAD_BOTTOM_W];
    assign c_pl = insn[`F_MEM_PAD_LEFT_LSB +: `F_MEM_PAD_LEFT_W];
    assign c_pr = insn[`F_MEM_PAD_RIGHT_LSB +: `F_MEM_PAD_RIGHT_W];
end endgenerate

assign buf_sel = insn[`F_MEM_BUF_LSB +: `F_MEM_BUF_W];
assign sp_base = insn[`F_MEM_SP_BASE_LSB +: `F_MEM_SP_BASE_W];
assign y_size = insn[`F_MEM_Y_SIZE_LSB +: `F_MEM_Y_SIZE_W];
assign x_size = insn[`F_MEM_X_SIZE_LSB +: `F_MEM_X_SIZE_W];
assign pad_top = c_pt;
assign pad_left = c_pl;
assign pad_value = insn[`F_MEM_PAD_VALUE_LSB +: `F_MEM_PAD_VALUE_W];

// element size and scratchpad depth of the buffer
reg [3:0]  lg_e_r;
reg [31:0] depth;
always @* begin
    if (STORE != 0) begin
        lg_e_r = buf_sel == `BUF_ACC8 ? LG_N : LG_ACC;
        depth = ACC_DEPTH;
    end else begin
        case (buf_sel)
            `BUF_INP: begin lg_e_r = LG_N; depth = INP_DEPTH; end
            `BUF_WGT: begin lg_e_r = LG_WGT; depth = WGT_DEPTH; end
            `BUF_ACC: begin lg_e_r = LG_ACC; depth = ACC_DEPTH; end
            default:  begin lg_e_r = LG_N; depth = ACC_DEPTH; end
        endcase
    end
end
assign lg_e = lg_e_r;

// tile geometry (memory rows/columns inside the padding)
assign rows = {{(RW - PDW){1'b0}}, c_pt} + {1'b0, y_size} + {{(RW - PDW){1'b0}}, c_pb};
assign cols = {{(CLW - PDW){1'b0}}, c_pl} + {1'b0, x_size} + {{(CLW - PDW){1'b0}}, c_pr};
assign total = {{CLW{1'b0}}, rows} * {{RW{1'b0}}, cols};

// memory addresses
wire [YW+XW-1:0] moved = {{XW{1'b0}}, y_size} * {{YW{1'b0}}, x_size};
assign addr0 = slots[32*c_slot +: 32] + c_off;
assign row_bytes = {{(32 - XW){1'b0}}, x_size} << lg_e;
assign stride_bytes = {16'd0, c_stride} << lg_e;
assign moved_bytes = {{(32 - YW - XW){1'b0}}, moved} << lg_e;

// the start-cycle checks
wire [31:0] e_mask = ~(32'hFFFF_FFFF << lg_e);
wire [31:0] sp_end = {{(32 - SBW){1'b0}}, sp_base} + {{(32 - TW){1'b0}}, total};
assign range_bad = total != {TW{1'b0}} && sp_end > depth;
assign align_bad = (addr0 & e_mask) != 32'd0;

// The header is the unit's business; a STORE has no padding.
wire unused_ok = &{1'b0, insn[`F_MEM_BUF_LSB-1:0],
                   insn[127:`F_MEM_PAD_VALUE_LSB + `F_MEM_PAD_VALUE_W],
                   insn[`F_MEM_PAD_TOP_LSB +: `F_MEM_PAD_TOP_W],
                   insn[`F_MEM_PAD_BOTTOM_LSB +: `F_MEM_PAD_BOTTOM_W],
                   insn[`F_MEM_PAD_LEFT_LSB +: `F_MEM_PAD_LEFT_W],
                   insn[`F_MEM_PAD_RIGHT_LSB +: `F_MEM_PAD_RIGHT_W]};

endmodule

`resetall
