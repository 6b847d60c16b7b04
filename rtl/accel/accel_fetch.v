`resetall
`timescale 1ns / 1ps
`default_nettype none

`include "accel_isa.vh"
`include "accel_cfg.vh"

// Fetch unit: reads the program from card memory, checks each instruction when it is next to
// dispatch (the spec's check_static) and pushes it into its unit's queue.
//
// Reads are INCR bursts of at most MAX_BURST beats, never across 4 KiB and never beyond the
// program's last beat. A burst is only requested when the prefetch buffer (2 * MAX_BURST beats,
// at least 16, rounded up to a power of two) has room for all of its beats, so R is never
// stalled: the unit shares the read data channel with the load unit and must not hold it up.
// Dispatch takes one instruction per cycle from the buffer's head beat while the target queue
// has room.
//
// Errors are reported in program order, as the instruction (or the beat holding it) reaches the
// head: FETCH_BUS (a beat that came back with RRESP != OKAY; err_pc = its first instruction),
// ILLEGAL_OPCODE / ILLEGAL_FIELD (err_pc = the instruction) and NO_END (err_pc = insn_count).
// After END, an error or `stop`, nothing more is dispatched, outstanding beats are accepted and
// dropped, and the unit goes idle once nothing is in flight.
module accel_fetch #(
    parameter integer N = `ACCEL_N,                       // array size (DW's taps limit and banks)
    parameter integer DATA_WIDTH = `ACCEL_DATA_WIDTH,     // AXI data width (/128: insns per beat)
    parameter integer ADDR_WIDTH = 32,                    // AXI address width (>= 32)
    parameter integer MAX_BURST = `ACCEL_FETCH_MAX_BURST  // longest burst (1..64 beats)
) (
    input  wire                     clk,
    input  wire                     rst,

    input  wire                     start,          // pulse: run the program at insn_base
    input  wire [31:0]              insn_base,      // 16-byte aligned; stable while running
    input  wire [31:0]              insn_count,     // > 0; stable while running
    input  wire                     stop,           // error/abort elsewhere: stop and drain

    output wire [ADDR_WIDTH-1:0]    m_axi_araddr,
    output wire [7:0]               m_axi_arlen,
    output wire                     m_axi_arvalid,
    input  wire                     m_axi_arready,
    input  wire [DATA_WIDTH-1:0]    m_axi_rdata,
    input  wire [1:0]               m_axi_rresp,
    input  wire                     m_axi_rlast,
    input  wire                     m_axi_rvalid,
    output wire                     m_axi_rready,

    output wire [127:0]             q_insn,         // the instruction being dispatched
    output wire [31:0]              q_pc,           // ... and its index from insn_base
    output wire                     q_push_load,
    output wire                     q_push_compute,
    output wire                     q_push_store,
    input  wire                     q_full_load,
    input  wire                     q_full_compute,
    input  wire                     q_full_store,

    output wire                     ended,          // END was dispatched (until the next start)
    output wire                     blocked,        // a legal instruction waits for a full queue
    output wire                     idle,           // not fetching and nothing in flight
    output wire                     insn_pulse,     // one cycle per dispatched instruction
    output wire                     err,            // one-cycle pulse
    output wire [7:0]               err_code,
    output wire [31:0]              err_pc
);

localparam integer BEAT_BYTES = DATA_WIDTH / 8;
localparam integer BSH = $clog2(BEAT_BYTES);        // byte address -> beat number
localparam integer IPB = DATA_WIDTH / 128;          // instructions per beat
localparam integer SW = $clog2(IPB);                // instruction slot within a beat
localparam integer PAGE_BEATS = 4096 / BEAT_BYTES;  // beats per 4 KiB page
localparam integer PW = $clog2(PAGE_BEATS);
localparam integer BUF_AW = $clog2(2 * MAX_BURST > 16 ? 2 * MAX_BURST : 16);
localparam integer BUF_BEATS = 1 << BUF_AW;         // prefetch buffer (beats)
localparam integer CW = BUF_AW + 1;                 // beat counts up to BUF_BEATS
localparam integer BW = 10;                         // burst lengths (beats, <= 128)
localparam [33:0] IPB_M1 = {2'b00, IPB[31:0]} - 34'd1;

initial begin
    if (IPB < 2 || (1 << SW) != IPB || IPB * 128 != DATA_WIDTH || BEAT_BYTES > 4096)
        $fatal(1, "accel_fetch: DATA_WIDTH must be 256..32768, a power of two, got %0d",
               DATA_WIDTH);
    if (ADDR_WIDTH < 32) $fatal(1, "accel_fetch: ADDR_WIDTH must be >= 32, got %0d", ADDR_WIDTH);
    if (N < 1 || N > 64) $fatal(1, "accel_fetch: N must be 1..64, got %0d", N);
    if (MAX_BURST < 1 || MAX_BURST > PAGE_BEATS)
        $fatal(1, "accel_fetch: MAX_BURST must be 1..%0d (one 4 KiB page), got %0d",
               PAGE_BEATS, MAX_BURST);
end

localparam [1:0] S_IDLE = 2'd0, S_RUN = 2'd1, S_DRAIN = 2'd2;

// --- state ---------------------------------------------------------------------------------------
reg [1:0]            state_reg, state_next;
reg                  ar_valid_reg, ar_valid_next;
reg [31-BSH:0]       ar_beat_reg, ar_beat_next;     // next beat to request (address >> BSH)
reg [31-BSH:0]       ar_addr_reg, ar_addr_next;     // beat number of the pending request
reg [7:0]            ar_len_reg, ar_len_next;
reg [32:0]           ar_left_reg, ar_left_next;     // beats still to request
reg [CW-1:0]         pend_reg, pend_next;           // beats requested, not yet received
reg [CW-1:0]         cnt_reg, cnt_next;             // beats in the buffer
reg [BUF_AW-1:0]     wr_ptr_reg, wr_ptr_next, rd_ptr_reg, rd_ptr_next;
reg [SW-1:0]         slot_reg, slot_next;           // head instruction within the head beat
reg [31:0]           pc_reg, pc_next;               // index of the head instruction
reg                  ended_reg, ended_next;
reg                  err_reg, err_next;
reg [7:0]            err_code_reg, err_code_next;
reg [31:0]           err_pc_reg, err_pc_next;

reg [DATA_WIDTH-1:0] buf_mem [0:BUF_BEATS-1];
reg                  buf_err [0:BUF_BEATS-1];       // the beat came back with an error

// --- head instruction and its static check -------------------------------------------------------
wire [DATA_WIDTH-1:0] head_beat = buf_mem[rd_ptr_reg];
wire                  head_bad = buf_err[rd_ptr_reg];
wire [127:0]          insn = head_beat[128*slot_reg +: 128];
wire                  head_valid = state_reg == S_RUN && cnt_reg != {CW{1'b0}};

wire [3:0] op = insn[`F_HDR_OPCODE_LSB +: `F_HDR_OPCODE_W];
wire f_pop_prev = insn[`F_HDR_POP_PREV_LSB];
wire f_pop_next = insn[`F_HDR_POP_NEXT_LSB];
wire f_push_prev = insn[`F_HDR_PUSH_PREV_LSB];
wire f_push_next = insn[`F_HDR_PUSH_NEXT_LSB];
wire [1:0] mem_buf = insn[`F_MEM_BUF_LSB +: `F_MEM_BUF_W];
wire mem_pads = |{insn[`F_MEM_PAD_TOP_LSB +: `F_MEM_PAD_TOP_W],
                  insn[`F_MEM_PAD_BOTTOM_LSB +: `F_MEM_PAD_BOTTOM_W],
                  insn[`F_MEM_PAD_LEFT_LSB +: `F_MEM_PAD_LEFT_W],
                  insn[`F_MEM_PAD_RIGHT_LSB +: `F_MEM_PAD_RIGHT_W]};
// a transposed LOAD: INP only, no padding, y_size a multiple of N (N is a power of two)
wire mem_tr = insn[`F_MEM_TRANSPOSE_LSB];
localparam integer NM1 = N - 1;
localparam [`F_MEM_Y_SIZE_W-1:0] N_MASK = NM1[`F_MEM_Y_SIZE_W-1:0];
wire tr_bad = mem_tr && (mem_buf != `BUF_INP || mem_pads
                         || (insn[`F_MEM_Y_SIZE_LSB +: `F_MEM_Y_SIZE_W] & N_MASK) != 0);
wire [2:0] alu_op = insn[`F_ALU_ALU_OP_LSB +: `F_ALU_ALU_OP_W];
wire alu_imm = insn[`F_ALU_USE_IMM_LSB];
// DW: taps 1..N, tap_w >= 1, and the taps in distinct INP banks (pyhost.spec.isa.dw_banks_ok:
// on one kernel row, or tap_pitch = tap_w mod N)
localparam integer N_I = N;
localparam [6:0] TAPS_MAX = N_I[6:0];
localparam [9:0] BANKS = N_I[9:0];
wire [6:0] dw_taps = insn[`F_DW_TAPS_LSB +: `F_DW_TAPS_W];
wire [3:0] dw_tap_w = insn[`F_DW_TAP_W_LSB +: `F_DW_TAP_W_W];
wire [9:0] dw_pitch = insn[`F_DW_TAP_PITCH_LSB +: `F_DW_TAP_PITCH_W];
wire dw_banks_ok = dw_taps <= {3'd0, dw_tap_w} || dw_pitch % BANKS == {6'd0, dw_tap_w} % BANKS;
wire dw_bad = dw_taps == 7'd0 || dw_taps > TAPS_MAX || dw_tap_w == 4'd0 || !dw_banks_ok;

reg [7:0] check;        // the check_static result of the head instruction
reg       to_load, to_compute, to_store, is_end;
always @* begin
    check = `ACC_ERR_NONE;
    to_load = 1'b0;
    to_compute = 1'b0;
    to_store = 1'b0;
    is_end = 1'b0;
    case (op)
        `OP_LOAD: begin
            to_load = 1'b1;
            if (f_pop_prev || f_push_prev || tr_bad) check = `ACC_ERR_ILLEGAL_FIELD;
        end
        `OP_STORE: begin
            to_store = 1'b1;
            if (f_pop_next || f_push_next || mem_pads || mem_tr
                || (mem_buf != `BUF_ACC && mem_buf != `BUF_ACC8))
                check = `ACC_ERR_ILLEGAL_FIELD;
        end
        `OP_GEMM: to_compute = 1'b1;
        `OP_DW: begin
            to_compute = 1'b1;
            if (dw_bad) check = `ACC_ERR_ILLEGAL_FIELD;
        end
        `OP_ALU: begin
            to_compute = 1'b1;
            if (alu_op > `ALU_REQ || (alu_op == `ALU_REQ && alu_imm))
                check = `ACC_ERR_ILLEGAL_FIELD;
        end
        `OP_XALU: begin
            to_compute = 1'b1;
            if (alu_op > `XALU_SQRT) check = `ACC_ERR_ILLEGAL_FIELD;   // the last XAluOp
        end
        `OP_END: begin
            is_end = 1'b1;
            if (f_pop_prev || f_pop_next || f_push_prev || f_push_next)
                check = `ACC_ERR_ILLEGAL_FIELD;
        end
        default: check = `ACC_ERR_ILLEGAL_OPCODE;
    endcase
end

wire legal = head_valid && !head_bad && check == `ACC_ERR_NONE;
wire q_full = (to_load && q_full_load) || (to_compute && q_full_compute)
              || (to_store && q_full_store);
wire dispatch = legal && !stop && (is_end || !q_full);
wire push = dispatch && !is_end;
wire last_insn = pc_reg + 32'd1 == insn_count;

// --- read requests: the next burst, sized to the buffer's free room ------------------------------
wire [CW-1:0] free_beats = BUF_BEATS[CW-1:0] - cnt_reg - pend_reg;
wire [PW:0]   page_left = PAGE_BEATS[PW:0] - {1'b0, ar_beat_reg[PW-1:0]};
reg  [BW-1:0] burst;    // beats of the next burst (1..MAX_BURST)
always @* begin
    burst = MAX_BURST[BW-1:0];
    if ({{(BW - PW - 1){1'b0}}, page_left} < burst) burst = {{(BW - PW - 1){1'b0}}, page_left};
    if (ar_left_reg < {{(33 - BW){1'b0}}, burst}) burst = ar_left_reg[BW-1:0];
end

// --- next state ----------------------------------------------------------------------------------
wire r_fire = m_axi_rvalid;             // rready is always 1: room was reserved
wire [SW:0] first_slot = {1'b0, insn_base[BSH-1:4]};
wire [33:0] prog_beats = ({2'b00, insn_count} + {{(33 - SW){1'b0}}, first_slot}
                          + IPB_M1) >> SW;

always @* begin
    state_next = state_reg;
    ar_valid_next = ar_valid_reg;
    ar_beat_next = ar_beat_reg;
    ar_addr_next = ar_addr_reg;
    ar_len_next = ar_len_reg;
    ar_left_next = ar_left_reg;
    pend_next = pend_reg;
    cnt_next = cnt_reg;
    wr_ptr_next = wr_ptr_reg;
    rd_ptr_next = rd_ptr_reg;
    slot_next = slot_reg;
    pc_next = pc_reg;
    ended_next = ended_reg;
    err_next = 1'b0;
    err_code_next = err_code_reg;
    err_pc_next = err_pc_reg;

    // address channel: keep a request stable until it is taken
    if (ar_valid_reg && m_axi_arready) ar_valid_next = 1'b0;
    if (state_reg == S_RUN && !stop && (!ar_valid_reg || m_axi_arready) && ar_left_reg != 33'd0
        && {{(BW - CW){1'b0}}, free_beats} >= burst) begin
        ar_valid_next = 1'b1;
        ar_addr_next = ar_beat_reg;
        ar_len_next = burst[7:0] - 8'd1;
        ar_beat_next = ar_beat_reg + {{(32 - BSH - BW){1'b0}}, burst};
        ar_left_next = ar_left_reg - {{(33 - BW){1'b0}}, burst};
        pend_next = pend_next + burst[CW-1:0];
    end

    // data channel: every beat is accepted; it is kept only while running
    if (r_fire) begin
        pend_next = pend_next - {{(CW-1){1'b0}}, 1'b1};
        if (state_reg == S_RUN) begin
            wr_ptr_next = wr_ptr_reg + {{(BUF_AW-1){1'b0}}, 1'b1};
            cnt_next = cnt_next + {{(CW-1){1'b0}}, 1'b1};
        end
    end

    case (state_reg)
        S_IDLE: if (start) begin
            state_next = S_RUN;
            ar_beat_next = insn_base[31:BSH];
            ar_left_next = prog_beats[32:0];
            slot_next = insn_base[BSH-1:4];
            pc_next = 32'd0;
            ended_next = 1'b0;
            cnt_next = {CW{1'b0}};
            wr_ptr_next = {BUF_AW{1'b0}};
            rd_ptr_next = {BUF_AW{1'b0}};
        end
        S_RUN: begin
            if (stop) begin
                state_next = S_DRAIN;
            end else if (head_valid && (head_bad || check != `ACC_ERR_NONE)) begin
                err_next = 1'b1;
                err_code_next = head_bad ? `ACC_ERR_FETCH_BUS : check;
                err_pc_next = pc_reg;
                state_next = S_DRAIN;
            end else if (dispatch) begin
                pc_next = pc_reg + 32'd1;
                slot_next = slot_reg + {{(SW-1){1'b0}}, 1'b1};
                if (slot_reg == {SW{1'b1}}) begin
                    rd_ptr_next = rd_ptr_reg + {{(BUF_AW-1){1'b0}}, 1'b1};
                    cnt_next = cnt_next - {{(CW-1){1'b0}}, 1'b1};
                end
                if (is_end) begin
                    ended_next = 1'b1;
                    state_next = S_DRAIN;
                end else if (last_insn) begin
                    err_next = 1'b1;
                    err_code_next = `ACC_ERR_NO_END;
                    err_pc_next = insn_count;
                    state_next = S_DRAIN;
                end
            end
        end
        S_DRAIN: begin
            // the buffer is dropped; wait for the last requested beat
            cnt_next = {CW{1'b0}};
            if (pend_reg == {CW{1'b0}} && !ar_valid_reg) state_next = S_IDLE;
        end
        default: state_next = S_IDLE;
    endcase
end

always @(posedge clk) begin
    if (r_fire && state_reg == S_RUN) begin
        buf_mem[wr_ptr_reg] <= m_axi_rdata;
        buf_err[wr_ptr_reg] <= m_axi_rresp != 2'b00;
    end
end

always @(posedge clk) begin
    state_reg <= state_next;
    ar_valid_reg <= ar_valid_next;
    ar_beat_reg <= ar_beat_next;
    ar_addr_reg <= ar_addr_next;
    ar_len_reg <= ar_len_next;
    ar_left_reg <= ar_left_next;
    pend_reg <= pend_next;
    cnt_reg <= cnt_next;
    wr_ptr_reg <= wr_ptr_next;
    rd_ptr_reg <= rd_ptr_next;
    slot_reg <= slot_next;
    pc_reg <= pc_next;
    ended_reg <= ended_next;
    err_reg <= err_next;
    err_code_reg <= err_code_next;
    err_pc_reg <= err_pc_next;
    if (rst) begin
        state_reg <= S_IDLE;
        ar_valid_reg <= 1'b0;
        ar_left_reg <= 33'd0;
        pend_reg <= {CW{1'b0}};
        cnt_reg <= {CW{1'b0}};
        wr_ptr_reg <= {BUF_AW{1'b0}};
        rd_ptr_reg <= {BUF_AW{1'b0}};
        slot_reg <= {SW{1'b0}};
        pc_reg <= 32'd0;
        ended_reg <= 1'b0;
        err_reg <= 1'b0;
        err_code_reg <= `ACC_ERR_NONE;
        err_pc_reg <= 32'd0;
    end
end

// --- outputs -------------------------------------------------------------------------------------
wire [31:0] ar_byte_addr = {ar_addr_reg, {BSH{1'b0}}};
generate if (ADDR_WIDTH > 32) begin : g_wide
    assign m_axi_araddr = {{(ADDR_WIDTH - 32){1'b0}}, ar_byte_addr};
end else begin : g_narrow
    assign m_axi_araddr = ar_byte_addr;
end endgenerate
assign m_axi_arlen = ar_len_reg;
assign m_axi_arvalid = ar_valid_reg;
assign m_axi_rready = 1'b1;

assign q_insn = insn;
assign q_pc = pc_reg;
assign q_push_load = push && to_load;
assign q_push_compute = push && to_compute;
assign q_push_store = push && to_store;

assign ended = ended_reg;
assign blocked = legal && !is_end && q_full;
assign idle = state_reg == S_IDLE;
assign insn_pulse = dispatch;
assign err = err_reg;
assign err_code = err_code_reg;
assign err_pc = err_pc_reg;

// Bursts are counted by beats, so RLAST is not needed; the top bit of prog_beats is 0 for any
// 32-bit count; insn_base is 16-byte aligned (the top checks it).
wire unused_ok = &{1'b0, m_axi_rlast, prog_beats[33], insn_base[3:0]};

endmodule

`resetall
