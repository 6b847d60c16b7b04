`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_cfg.vh"

// Address-channel generator of the load and store units (AR or AW): walks the memory rows of a
// MEM instruction and issues INCR bursts covering each row's bytes.
//
// `start` loads the walk: the first row's address, the number of memory rows (0: nothing to
// request), the bytes of a row and the row stride (row_bytes and stride_bytes must stay stable
// until the walk is done). While `enable` is high a burst is issued whenever the channel is free
// or being taken and fewer than MAX_OUTSTANDING bursts are in flight; a burst is at most
// MAX_BURST beats, never crosses 4 KiB and never runs past its row. VALID, ADDR and LEN stay
// stable until READY. A burst counts as in flight from its issue until `burst_done` (the last R
// beat, or the B response). `requested` is high when every burst of the walk has been issued.
module accel_burst_walker #(
    parameter integer DATA_WIDTH = `ACCEL_DATA_WIDTH,                // card AXI data width
    parameter integer ADDR_WIDTH = 32,                               // AXI address width (>= 32)
    parameter integer MAX_BURST = `ACCEL_MEM_MAX_BURST,              // longest burst (beats)
    parameter integer MAX_OUTSTANDING = `ACCEL_MEM_MAX_OUTSTANDING,  // bursts in flight
    parameter integer ROWS_W = 12                                    // width of the row count
) (
    input  wire                     clk,
    input  wire                     rst,

    // the walk, loaded by `start`
    input  wire                     start,
    input  wire [31:0]              start_addr,
    input  wire [ROWS_W-1:0]        start_rows,
    input  wire [31:0]              row_bytes,
    input  wire [31:0]              stride_bytes,

    input  wire                     enable,
    input  wire                     burst_done,
    output wire                     requested,
    output wire                     none_outstanding,

    // address channel
    output wire [ADDR_WIDTH-1:0]    a_addr,
    output wire [7:0]               a_len,
    output wire                     a_valid,
    input  wire                     a_ready
);

localparam integer BEAT = DATA_WIDTH / 8;           // bytes per beat
localparam integer BSH = $clog2(BEAT);
localparam integer PAGE_BEATS = 4096 / BEAT;
localparam integer PW = $clog2(PAGE_BEATS);
localparam integer LW = 32 - BSH;                   // beat numbers and beat counts
localparam integer BW = 10;                         // burst lengths
localparam integer OW = $clog2(MAX_OUTSTANDING + 1);

initial begin
    if ((1 << BSH) != BEAT || BEAT < 16 || BEAT > 4096)
        $fatal(1, "accel_burst_walker: DATA_WIDTH must be a power of two, 128..32768, got %0d",
               DATA_WIDTH);
    if (ADDR_WIDTH < 32)
        $fatal(1, "accel_burst_walker: ADDR_WIDTH must be >= 32, got %0d", ADDR_WIDTH);
    if (MAX_BURST < 1 || MAX_BURST > PAGE_BEATS || MAX_BURST > 256)
        $fatal(1, "accel_burst_walker: MAX_BURST must be 1..%0d, got %0d", PAGE_BEATS,
               MAX_BURST);
    if (MAX_OUTSTANDING < 1 || MAX_OUTSTANDING > 64)
        $fatal(1, "accel_burst_walker: MAX_OUTSTANDING must be 1..64, got %0d",
               MAX_OUTSTANDING);
    if (ROWS_W < 1 || ROWS_W > 31)
        $fatal(1, "accel_burst_walker: ROWS_W must be 1..31, got %0d", ROWS_W);
end

reg              valid_reg, valid_next;
reg [LW-1:0]     addr_reg, addr_next;              // beat number of the pending burst
reg [7:0]        len_reg, len_next;
reg [LW-1:0]     beat_reg, beat_next;              // next beat of the current row
reg [LW-1:0]     left_reg, left_next;              // beats of the current row still to request
reg [ROWS_W-1:0] rows_reg, rows_next;              // memory rows after the current one
reg [31:0]       row_reg, row_next;                // address of the next memory row
reg [OW-1:0]     ost_reg, ost_next;                // bursts issued, not yet done

// beats a memory row covers from its first beat: the first row, and the row at row_reg
localparam [32:0] BEAT_M1 = (33'd1 << BSH) - 33'd1;
wire [32:0] span0 = {{(33 - BSH){1'b0}}, start_addr[BSH-1:0]} + {1'b0, row_bytes} + BEAT_M1;
wire [32:0] span1 = {{(33 - BSH){1'b0}}, row_reg[BSH-1:0]} + {1'b0, row_bytes} + BEAT_M1;

wire [PW:0] page_left = PAGE_BEATS[PW:0] - {1'b0, beat_reg[PW-1:0]};
reg  [BW-1:0] burst;
always @* begin
    burst = MAX_BURST[BW-1:0];
    if ({{(BW - PW - 1){1'b0}}, page_left} < burst) burst = {{(BW - PW - 1){1'b0}}, page_left};
    if (left_reg < {{(LW - BW){1'b0}}, burst}) burst = left_reg[BW-1:0];
end

always @* begin
    valid_next = valid_reg;
    addr_next = addr_reg;
    len_next = len_reg;
    beat_next = beat_reg;
    left_next = left_reg;
    rows_next = rows_reg;
    row_next = row_reg;
    ost_next = ost_reg;

    // a request stays until it is taken
    if (valid_reg && a_ready) valid_next = 1'b0;
    if (enable && (!valid_reg || a_ready) && left_reg != {LW{1'b0}}
        && ost_reg != MAX_OUTSTANDING[OW-1:0]) begin
        valid_next = 1'b1;
        addr_next = beat_reg;
        len_next = burst[7:0] - 8'd1;
        ost_next = ost_next + {{(OW-1){1'b0}}, 1'b1};
        beat_next = beat_reg + {{(LW - BW){1'b0}}, burst};
        left_next = left_reg - {{(LW - BW){1'b0}}, burst};
        if (left_reg == {{(LW - BW){1'b0}}, burst} && rows_reg != {ROWS_W{1'b0}}) begin
            beat_next = row_reg[31:BSH];
            left_next = span1[BSH +: LW];
            row_next = row_reg + stride_bytes;
            rows_next = rows_reg - {{(ROWS_W-1){1'b0}}, 1'b1};
        end
    end
    if (burst_done) ost_next = ost_next - {{(OW-1){1'b0}}, 1'b1};

    if (start) begin
        beat_next = start_addr[31:BSH];
        row_next = start_addr + stride_bytes;
        if (start_rows != {ROWS_W{1'b0}}) begin
            left_next = span0[BSH +: LW];
            rows_next = start_rows - {{(ROWS_W-1){1'b0}}, 1'b1};
        end else begin
            left_next = {LW{1'b0}};
            rows_next = {ROWS_W{1'b0}};
        end
    end
end

always @(posedge clk) begin
    valid_reg <= valid_next;
    addr_reg <= addr_next;
    len_reg <= len_next;
    beat_reg <= beat_next;
    left_reg <= left_next;
    rows_reg <= rows_next;
    row_reg <= row_next;
    ost_reg <= ost_next;

    if (rst) begin
        valid_reg <= 1'b0;
        left_reg <= {LW{1'b0}};
        rows_reg <= {ROWS_W{1'b0}};
        ost_reg <= {OW{1'b0}};
    end
end

wire [31:0] byte_addr = {addr_reg, {BSH{1'b0}}};
generate if (ADDR_WIDTH > 32) begin : g_wide
    assign a_addr = {{(ADDR_WIDTH - 32){1'b0}}, byte_addr};
end else begin : g_narrow
    assign a_addr = byte_addr;
end endgenerate
assign a_len = len_reg;
assign a_valid = valid_reg;
assign requested = left_reg == {LW{1'b0}};
assign none_outstanding = ost_reg == {OW{1'b0}};

// Row spans are used from the beat bit up.
wire unused_ok = &{1'b0, span0[32], span0[BSH-1:0], span1[32], span1[BSH-1:0]};

endmodule

`resetall
