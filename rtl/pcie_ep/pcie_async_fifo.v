`resetall
`timescale 1ns / 1ps
`default_nettype none

// Asynchronous FIFO: a valid/ready stream from the write clock domain to the read clock domain
// (the PCIe user clock and the card clock). Gray-coded pointers cross through two flip-flops;
// the memory is written in the write domain and read combinationally at the read pointer, so a
// word appears on the read side two or three read clocks after it was written, and the FIFO
// passes one word per clock on both sides while it is neither empty nor full.
module pcie_async_fifo #(
    parameter integer WIDTH = 8,             // bits per word
    parameter integer DEPTH_LOG2 = 4         // log2 of the words it holds (>= 2)
) (
    input  wire              wr_clk,
    input  wire              wr_rst,
    input  wire [WIDTH-1:0]  s_data,
    input  wire              s_valid,
    output wire              s_ready,

    input  wire              rd_clk,
    input  wire              rd_rst,
    output wire [WIDTH-1:0]  m_data,
    output wire              m_valid,
    input  wire              m_ready
);

localparam integer A = DEPTH_LOG2;

initial begin
    if (DEPTH_LOG2 < 2 || DEPTH_LOG2 > 10)
        $fatal(1, "pcie_async_fifo: DEPTH_LOG2 must be 2..10, got %0d", DEPTH_LOG2);
end

reg [WIDTH-1:0] mem [0:(1<<A)-1];

function [A:0] bin2gray;
    input [A:0] b;
    bin2gray = b ^ (b >> 1);
endfunction

function [A:0] gray2bin;
    input [A:0] g;
    integer k;
    begin
        gray2bin[A] = g[A];
        for (k = A - 1; k >= 0; k = k - 1)
            gray2bin[k] = gray2bin[k + 1] ^ g[k];
    end
endfunction

// write domain
reg [A:0] wp_bin, wp_gray, rp_gray_w1, rp_gray_w2;
wire [A:0] rp_bin_w = gray2bin(rp_gray_w2);
wire [A:0] used_w = wp_bin - rp_bin_w;           // A+1 bits: wraps like the pointers
wire full = used_w == {1'b1, {A{1'b0}}};
assign s_ready = !full && !wr_rst;
wire [A:0] wp_next = wp_bin + {{A{1'b0}}, 1'b1};

always @(posedge wr_clk) begin
    if (s_valid && s_ready) begin
        mem[wp_bin[A-1:0]] <= s_data;
        wp_bin <= wp_next;
        wp_gray <= bin2gray(wp_next);
    end
    rp_gray_w1 <= rp_gray;
    rp_gray_w2 <= rp_gray_w1;
    if (wr_rst) begin
        wp_bin <= {A+1{1'b0}};
        wp_gray <= {A+1{1'b0}};
        rp_gray_w1 <= {A+1{1'b0}};
        rp_gray_w2 <= {A+1{1'b0}};
    end
end

// read domain
reg [A:0] rp_bin, rp_gray, wp_gray_r1, wp_gray_r2;
wire empty = bin2gray(rp_bin) == wp_gray_r2;
assign m_valid = !empty && !rd_rst;
assign m_data = mem[rp_bin[A-1:0]];
wire [A:0] rp_next = rp_bin + {{A{1'b0}}, 1'b1};

always @(posedge rd_clk) begin
    if (m_valid && m_ready) begin
        rp_bin <= rp_next;
        rp_gray <= bin2gray(rp_next);
    end
    wp_gray_r1 <= wp_gray;
    wp_gray_r2 <= wp_gray_r1;
    if (rd_rst) begin
        rp_bin <= {A+1{1'b0}};
        rp_gray <= {A+1{1'b0}};
        wp_gray_r1 <= {A+1{1'b0}};
        wp_gray_r2 <= {A+1{1'b0}};
    end
end

endmodule

`resetall
