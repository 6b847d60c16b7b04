`resetall
`timescale 1ns / 1ps
`default_nettype none

// A synchronous first-word-fall-through FIFO: the head is on `rd_data` while `rd_valid`. Used
// for the accelerator's per-unit instruction queues. `flush` empties it (wins over a write).
module accel_fifo #(
    parameter integer WIDTH = 160,      // bits per entry
    parameter integer DEPTH = 8         // entries (a power of two, >= 2)
) (
    input  wire             clk,
    input  wire             rst,
    input  wire             flush,
    input  wire             wr_en,
    input  wire [WIDTH-1:0] wr_data,
    output wire             full,
    input  wire             rd_en,
    output wire [WIDTH-1:0] rd_data,
    output wire             rd_valid,
    output wire             empty
);

localparam integer AW = $clog2(DEPTH);

initial begin
    if (DEPTH < 2 || (1 << AW) != DEPTH) $fatal(1, "accel_fifo: DEPTH must be a power of two >= 2");
end

reg [WIDTH-1:0] mem [0:DEPTH-1];
reg [AW:0]      wr_ptr_reg, rd_ptr_reg;

assign empty = wr_ptr_reg == rd_ptr_reg;
assign full = wr_ptr_reg == {~rd_ptr_reg[AW], rd_ptr_reg[AW-1:0]};
assign rd_valid = !empty;
assign rd_data = mem[rd_ptr_reg[AW-1:0]];

always @(posedge clk) begin
    if (wr_en && !full && !flush) begin
        mem[wr_ptr_reg[AW-1:0]] <= wr_data;
        wr_ptr_reg <= wr_ptr_reg + 1'b1;
    end
    if (rd_en && !empty && !flush)
        rd_ptr_reg <= rd_ptr_reg + 1'b1;
    if (rst || flush) begin
        wr_ptr_reg <= {(AW+1){1'b0}};
        rd_ptr_reg <= {(AW+1){1'b0}};
    end
end

endmodule

`resetall
