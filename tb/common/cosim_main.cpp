// The main loop of every Verilator model cocotb runs here (tb/common/simulator.py builds it in
// place of cocotb's own main): the VPI phases of a time step as cocotb's GPI expects them, plus a
// clock generated in C++.
//
// Time steps. Each step evaluates the model until no VPI write or value-change callback asks for
// more, then runs the ReadWrite callbacks (cocotb applies its writes there or as inertial puts),
// evaluates again while needed, ends the step (ReadOnly callbacks, one trace dump), and advances
// to the earliest of: the next cocotb timer (cbAfterDelay), the next event of the model, and the
// next edge of the built-in clock. At the new time the NextSimTime and then the timed callbacks
// run, each followed by the value-change callbacks they cause.
//
// The built-in clock. `cosim_clock_start(name, period, high, start_high)` (exported: Python calls
// it through ctypes, see tb/common/clocking.py) drives the named signal with a 50:50 (high/period)
// clock from the current time, exactly as cocotb's clock does: the first value is written like
// cocotb's inertial write (applied with the other writes of the current step) and each edge is
// applied at the start of its time step together with the writes of that step's timed callbacks,
// before the model is evaluated, so that RisingEdge(clk) callbacks run on the values before the
// edge and the model sees the edge once. cocotb's clock does the same from a timed callback
// whose inertial write is applied only after a first evaluation of the step (which changes
// nothing), so each edge costs two evaluations there and one here: with no Python running while
// the card computes, this is the model's own speed, as in a pure C++ harness.
//
// Stream sources. `cosim_stream_open` (exported, called through ctypes by
// tb/common/pcie_streams.py's RcStream) plays the hard IP's 512-bit RC stream in C++: Python
// hands it whole completions (DWORDs and byte enables), it builds the beats as cocotbext-pcie's
// RcSource does (parity, is_sop/is_eop and their pointers; with the RC straddle in two or four
// segments, a completion starting in the segment after the previous one ends when it is queued
// as the beat is built), and at each rising edge of the stream's clock it does what the Python
// source would do (the card took the beat on the bus, or none is up: the next one goes up;
// TVALID drops when there is none), with no Python per beat. The edge is seen by a value-change
// callback like cocotb's RisingEdge (values before the edge is evaluated), registered only while
// the source has work, and the beat is written with inertial puts, which this main applies
// after that evaluation (where cocotb applies its writes). Frames wait in a backlog until the
// source's queue has room (at most `limit` + 1 frames), and leave the queue as the Python
// source takes them: one beat staged for the edge, the next built as soon as it is staged (the
// hard IP model's receive-buffer accounting follows `moved`, the frames that left the backlog).
//
// Host memory. `cosim_axi_host_open` (exported, called through ctypes by
// tb/common/host_memory_axi.py's HostMemoryAxiSlave) serves an AXI4 master port of the model
// from host memory in place of the Python model, for configurations without random jitter,
// reordering or pause patterns: the same handshakes at the same edges, the same read latency,
// posted writes with their B response, SLVERR for injected ranges and for addresses outside
// host memory, cycle for cycle what the Python model does (tests/rtl/test_card_host_memory.py
// runs both on the same traffic). It reads and writes the host memory's own bytes (the numpy
// array behind pyhost.backend.HostMemory). Like the Python model it sleeps while nothing is in
// flight and no VALID is up, and only awake is the clock watched. It is woken where a value-
// change callback on a VALID would run (each time the main loop checks the callbacks): the main
// loop reads the three VALIDs' storage directly when they are plain one-bit signals (no VPI
// callback in the list that every check walks), else value-change callbacks on them wake it.
//
// Quiet steps. While no callback runs, nothing registers one, so after a step in which none ran
// and no ReadWrite, ReadOnly, NextSimTime or timed callback is due, the following steps skip
// those phases (and the NextSimTime call that moves due timers) until a callback runs or the
// earliest timer's time comes: while the card works alone, a step is the clock's write, one
// evaluation and the value-change check.
//
// Command line (as cocotb's Verilator runner passes it): --trace, --trace-file FILE,
// --trace-flush; plusargs go to the model and cocotb.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

#if VM_TRACE
#if VM_TRACE_FST
#include <verilated_fst_c.h>
using TraceFile = VerilatedFstC;
static const char* const kDefaultTrace = "dump.fst";
#else
#include <verilated_vcd_c.h>
using TraceFile = VerilatedVcdC;
static const char* const kDefaultTrace = "dump.vcd";
#endif
static TraceFile* trace_file = nullptr;
#endif

static uint64_t sim_time = 0;  // in the model's precision (the timescale's second part)

double sc_time_stamp() { return static_cast<double>(sim_time); }

extern "C" void vlog_startup_routines_bootstrap(void);

namespace {

constexpr uint64_t kNever = ~static_cast<uint64_t>(0);

// The built-in clock.
struct BuiltinClock {
    vpiHandle signal = nullptr;
    CData* port = nullptr;  // the signal's storage, when it is a plain writable bit
    bool running = false;
    bool pending = false;   // the value below waits to be written at the next put point
    int value = 0;
    uint64_t period = 0;
    uint64_t high = 0;
    uint64_t next_edge = kNever;

    // A plain public one-bit signal is written in place: the same bytes vpi_put_value writes
    // (VerilatedVpioVar's data is the VerilatedVar's), without its per-call checks, format
    // conversion and error bookkeeping; the model is evaluated after every edge anyway, so its
    // eval-needed flag is not needed. Anything else goes through VPI.
    void write() {
        if (port) {
            *port = static_cast<CData>(value);
        } else {
            s_vpi_value v;
            v.format = vpiIntVal;
            v.value.integer = value;
            vpi_put_value(signal, &v, nullptr, vpiNoDelay);
        }
        pending = false;
    }

    // At time `now` (the time of next_edge): toggle, schedule the edge after.
    void edge(uint64_t now) {
        value ^= 1;
        pending = true;
        next_edge = now + (value ? high : period - high);
    }
};

BuiltinClock clock_gen;

// The hard IP's RC stream played from C++ (see the top of the file).
struct StreamSource {
    // The 512-bit RC stream's tuser fields (UltraScale+ PCIe hard IP, as cocotbext-pcie's
    // RcSource drives them): byte enables at 4 * lane, is_sop[4] at 64, is_sop_ptr[4] (2 bits
    // each) at 68, is_eop[4] at 76, is_eop_ptr[4] (4 bits each) at 80, discontinue at 96,
    // parity at 97 + 4 * lane.
    static constexpr int kLanes = 16, kSop = 64, kSopPtr = 68, kEop = 76, kEopPtr = 80,
                         kDiscontinue = 96, kParity = 97;
    struct Beat {
        std::vector<s_vpi_vecval> data, user;
        uint32_t keep = 0;
        uint32_t last = 0;
    };
    struct Frame {                   // a completion: DWORDs, their byte enables, discontinue
        std::vector<uint32_t> dw;
        std::vector<uint8_t> be;
        bool disc = false;
    };

    vpiHandle clk = nullptr, reset = nullptr, tvalid = nullptr, tready = nullptr;
    vpiHandle tdata = nullptr, tkeep = nullptr, tuser = nullptr, tlast = nullptr;
    vpiHandle cb = nullptr;          // the clock's value-change callback, while armed
    int data_words = 0, user_words = 0;
    int limit = 2;                   // the queue is full with more than `limit` frames
    int segments = 1;                // 1, or 2 / 4 with the RC straddle
    std::deque<Frame> backlog;       // frames waiting for room in the queue
    std::deque<Frame> queue;         // the source's queue
    Frame cur;                       // the frame the last built beat ended inside
    size_t cur_off = 0;              // its DWORDs already in beats
    bool has_cur = false;
    Beat built;                      // the beat built after the staged one
    bool has_built = false;
    Beat staged;                     // the beat that goes up at the next handshake
    bool has_staged = false;
    bool valid = false;              // TVALID as driven
    bool paused = false;
    bool refilling = false;
    bool took = false;               // a frame left the queue during the current stage()
    int prev_clk = -1;
    uint64_t moved = 0;              // frames that left the backlog
    uint64_t taken = 0;              // frames that left the queue
    uint64_t driven = 0;             // beats driven
    uint64_t by_tlps[5] = {};        // beats driven by the TLPs they carry (a part of)
    uint32_t starts = 0;             // bit k: a TLP started in segment (4 DWORDs) k
    uint32_t keep_driven = 0, last_driven = 0;
    s_vpi_value clk_value{};

    static int get_int(vpiHandle h) {
        s_vpi_value v;
        v.format = vpiIntVal;
        vpi_get_value(h, &v);
        return v.value.integer;
    }
    static void put_int(vpiHandle h, int x) {
        s_vpi_value v;
        v.format = vpiIntVal;
        v.value.integer = x;
        s_vpi_time t{};
        t.type = vpiSimTime;
        vpi_put_value(h, &v, &t, vpiInertialDelay);
    }
    static void put_vec(vpiHandle h, std::vector<s_vpi_vecval>& words) {
        s_vpi_value v;
        v.format = vpiVectorVal;
        v.value.vector = words.data();
        s_vpi_time t{};
        t.type = vpiSimTime;
        vpi_put_value(h, &v, &t, vpiInertialDelay);
    }
    static void set_bits(std::vector<s_vpi_vecval>& w, int pos, uint32_t value, int width) {
        for (int i = 0; i < width; ++i)
            if (value >> i & 1) w[(pos + i) >> 5].aval |= 1u << ((pos + i) & 31);
    }
    // Odd parity of each byte of a DWORD: bit k is 1 when byte k has an even number of ones.
    static uint32_t parity(uint32_t d) {
        uint32_t p = 0;
        for (int k = 0; k < 4; ++k)
            p |= static_cast<uint32_t>(~__builtin_popcount((d >> (8 * k)) & 0xFF) & 1) << k;
        return p;
    }

    bool full() const { return static_cast<int>(queue.size()) > limit; }

    // The next frame from the queue, or false when it is empty.
    bool take() {
        if (queue.empty()) return false;
        cur = std::move(queue.front());
        queue.pop_front();
        cur_off = 0;
        has_cur = true;
        took = true;
        ++taken;
        return true;
    }
    // The next beat into `built`, as cocotbext-pcie's RcSource._run builds it (and
    // tb/common/pcie_streams.py's RcPacker): the rest of the current frame, then frames from
    // the queue while segments remain (a frame starts at a segment boundary); false when there
    // is nothing to send.
    bool build() {
        if (!has_cur && !take()) return false;
        Beat& b = built;
        std::fill(b.data.begin(), b.data.end(), s_vpi_vecval{0, 0});
        std::fill(b.user.begin(), b.user.end(), s_vpi_vecval{0, 0});
        b.keep = 0;
        b.last = 0;
        const int lanes = kLanes / segments;
        int sop = 0, eop = 0;
        for (int seg = 0; seg < segments; ++seg) {
            if (!has_cur && !take()) break;
            const int lo = seg * lanes;
            const size_t d = cur.dw.size();
            const int n = static_cast<int>(std::min<size_t>(lanes, d - cur_off));
            for (int k = 0; k < lanes; ++k) {
                const int lane = lo + k;
                if (k < n) {
                    const uint32_t w = cur.dw[cur_off + k];
                    b.data[lane].aval = w;
                    b.keep |= 1u << lane;
                    set_bits(b.user, 4 * lane, cur.be[cur_off + k], 4);
                    set_bits(b.user, kParity + 4 * lane, parity(w), 4);
                } else {
                    set_bits(b.user, kParity + 4 * lane, 0xF, 4);
                }
            }
            if (cur_off == 0) {
                set_bits(b.user, kSop + sop, 1, 1);
                set_bits(b.user, kSopPtr + 2 * sop, static_cast<uint32_t>(lo >> 2), 2);
                ++sop;
            }
            if (cur.disc) set_bits(b.user, kDiscontinue, 1, 1);
            cur_off += n;
            if (cur_off >= d) {
                set_bits(b.user, kEop + eop, 1, 1);
                set_bits(b.user, kEopPtr + 4 * eop, static_cast<uint32_t>(lo + n - 1), 4);
                ++eop;
                if (segments == 1) b.last = 1;
                has_cur = false;
            }
        }
        return true;
    }
    // cocotbext-pcie's RcSource._run, synchronously: one beat waits for the edge (staged), the
    // next is built as soon as it was staged; a frame arriving while nothing is being built
    // starts a beat at once.
    void stage() {
        took = false;
        if (!has_staged) {
            if (!has_built) has_built = build();
            if (has_built) {
                std::swap(staged, built);
                has_built = false;
                has_staged = true;
            }
        }
        if (has_staged && !has_built) has_built = build();
        if (took) refill();          // the queue has room again
    }
    void refill() {                  // frames leave the backlog while the queue has room
        if (refilling) return;
        refilling = true;
        while (!backlog.empty() && !full()) {
            queue.push_back(std::move(backlog.front()));
            backlog.pop_front();
            ++moved;
            stage();
        }
        refilling = false;
    }
    void drive(Beat& b) {
        put_vec(tdata, b.data);
        put_vec(tuser, b.user);
        if (b.keep != keep_driven) put_int(tkeep, static_cast<int>(b.keep));
        if (b.last != last_driven) put_int(tlast, static_cast<int>(b.last));
        keep_driven = b.keep;
        last_driven = b.last;
        ++driven;
        const uint32_t w = b.user[kSop >> 5].aval;   // is_sop and is_sop_ptr
        const uint32_t sop = (w >> (kSop & 31)) & 0xF;
        int tlps = 1;                                // a TLP from an earlier beat ...
        for (int k = 0; k < 4; ++k) {
            if (!(sop >> k & 1)) continue;
            const uint32_t ptr = (w >> ((kSopPtr & 31) + 2 * k)) & 3;
            starts |= 1u << ptr;
            tlps += ptr == 0 ? 0 : 1;                // ... unless one starts at DWORD 0
        }
        ++by_tlps[std::min(tlps, 4)];
    }
    void edge() {
        if (reset && get_int(reset)) {
            if (valid) put_int(tvalid, 0);
            valid = false;
        } else if (valid && !get_int(tready)) {
            return;                  // the card holds the beat
        } else if (has_staged && !paused) {
            drive(staged);
            has_staged = false;
            if (!valid) put_int(tvalid, 1);
            valid = true;
            stage();
        } else if (valid) {
            put_int(tvalid, 0);
            valid = false;
        }
        if (!valid && !has_staged && !has_built && !has_cur && queue.empty() && backlog.empty())
            disarm();                // idle: sleep
    }
    static PLI_INT32 on_clk(p_cb_data data) {
        auto* s = reinterpret_cast<StreamSource*>(data->user_data);
        const int v = get_int(s->clk);
        if (v == 1 && s->prev_clk == 0) s->edge();
        s->prev_clk = v;
        return 0;
    }
    // The clock's value-change callback is registered only while the source has something
    // to do (as the Python source sleeps while idle): a callback on the user clock costs every
    // time step of the model, not only its own edges.
    void arm() {
        if (cb) return;
        prev_clk = get_int(clk);
        s_cb_data c{};
        c.reason = cbValueChange;
        c.cb_rtn = &StreamSource::on_clk;
        c.obj = clk;
        c.value = &clk_value;
        c.user_data = reinterpret_cast<PLI_BYTE8*>(this);
        cb = vpi_register_cb(&c);
    }
    void disarm() {
        if (!cb) return;
        vpi_remove_cb(cb);
        cb = nullptr;
    }
};

std::vector<std::unique_ptr<StreamSource>> stream_sources;

// An AXI4 slave serving host memory (see the top of the file): HostMemoryAxiSlave._run for a
// configuration with a fixed read latency, in order, without pauses.
struct AxiHostMemory {
    enum Sig { ARID, ARADDR, ARLEN, ARVALID, ARREADY, RID, RDATA, RRESP, RLAST, RVALID, RREADY,
               AWID, AWADDR, AWLEN, AWVALID, AWREADY, WDATA, WSTRB, WLAST, WVALID, WREADY,
               BID, BRESP, BVALID, BREADY, NSIG };
    static constexpr const char* kNames[NSIG] = {
        "arid", "araddr", "arlen", "arvalid", "arready", "rid", "rdata", "rresp", "rlast",
        "rvalid", "rready", "awid", "awaddr", "awlen", "awvalid", "awready", "wdata", "wstrb",
        "wlast", "wvalid", "wready", "bid", "bresp", "bvalid", "bready"};
    struct Read {
        uint32_t id = 0;
        uint64_t addr = 0, beats = 0, ready_at = 0, sent = 0;
    };
    struct Write {
        uint32_t id = 0;
        uint64_t addr = 0, beats = 0;
    };

    vpiHandle clk = nullptr;
    vpiHandle sig[NSIG] = {};
    vpiHandle clk_cb = nullptr;
    vpiHandle wake_cb[3] = {};
    CData* valid_bit[3] = {};        // the VALIDs' storage, when all three are plain bits
    bool asleep = false;             // woken by the main loop (valid_bit) or by wake_cb
    uint8_t* mem = nullptr;          // host memory [base, base + size)
    uint64_t base = 0, size = 0;
    uint64_t latency = 0;            // cycles from AR to the first R beat
    int line = 64;                   // bytes per beat
    int words = 16;                  // 32-bit words per beat
    std::vector<std::pair<uint64_t, uint64_t>> errors;   // [start, end): SLVERR
    std::deque<Read> reads;
    Read cur;
    bool has_cur = false;
    std::deque<Write> writes;
    uint64_t w_beat = 0, w_bytes = 0;
    int64_t w_lo = -1, w_hi = -1;
    bool w_failed = false;
    std::deque<std::pair<uint32_t, uint32_t>> bq;        // (id, resp)
    bool b_out = false, r_out = false;
    uint64_t period = 0, last_edge = 0, cycle = 0;
    int prev_clk = -1;
    // what is driven (puts only on a change)
    int d_arready = 0, d_awready = 0, d_wready = 0, d_bvalid = 0, d_rvalid = 0;
    uint64_t reads_served = 0, writes_served = 0, max_in_flight = 0;
    bool log = false;                // record bursts for the Python listeners
    std::vector<uint64_t> bursts;    // (kind 0 read / 1 write, addr, beats, lo, hi, bytes)
    std::vector<s_vpi_vecval> vec;   // a beat's words
    s_vpi_value clk_value{}, wake_value{};

    static uint64_t get_u64(vpiHandle h) {
        s_vpi_value v;
        v.format = vpiVectorVal;
        vpi_get_value(h, &v);
        uint64_t x = v.value.vector[0].aval;
        if (vpi_get(vpiSize, h) > 32) x |= static_cast<uint64_t>(v.value.vector[1].aval) << 32;
        return x;
    }
    static int get_bit(vpiHandle h) { return StreamSource::get_int(h) & 1; }
    static void put(vpiHandle h, int x) { StreamSource::put_int(h, x); }
    void set(Sig k, int& driven, int x) {
        if (driven != x) put(sig[k], x);
        driven = x;
    }
    bool bad(uint64_t a, uint64_t n) const {
        for (const auto& e : errors)
            if (a < e.second && a + n > e.first) return true;
        return false;
    }
    bool contains(uint64_t a, uint64_t n) const { return base <= a && a + n <= base + size; }

    // One rising edge of the clock (values before the edge), as HostMemoryAxiSlave._run.
    void edge() {
        s_vpi_time t{};
        t.type = vpiSimTime;
        vpi_get_time(nullptr, &t);
        const uint64_t now = (static_cast<uint64_t>(t.high) << 32) | t.low;
        if (period == 0 && last_edge) period = now - last_edge;
        cycle += period ? std::max<uint64_t>(1, (now - last_edge + period / 2) / period) : 1;
        last_edge = now;
        const uint64_t c = cycle;
        // handshakes at this edge
        if (get_bit(sig[ARVALID]) && d_arready) {
            Read r;
            r.id = static_cast<uint32_t>(get_u64(sig[ARID]));
            r.addr = get_u64(sig[ARADDR]);
            r.beats = get_u64(sig[ARLEN]) + 1;
            r.ready_at = c + latency;
            reads.push_back(r);
            if (log) bursts.insert(bursts.end(), {0, r.addr, r.beats, 0, 0, 0});
            max_in_flight = std::max<uint64_t>(max_in_flight, reads.size());
        }
        if (r_out && get_bit(sig[RREADY])) {
            ++cur.sent;
            r_out = false;
            if (cur.sent == cur.beats) {
                ++reads_served;
                has_cur = false;
            }
        }
        if (get_bit(sig[AWVALID]) && d_awready) {
            Write w;
            w.id = static_cast<uint32_t>(get_u64(sig[AWID]));
            w.addr = get_u64(sig[AWADDR]);
            w.beats = get_u64(sig[AWLEN]) + 1;
            writes.push_back(w);
        }
        if (get_bit(sig[WVALID]) && d_wready) write_beat();
        if (b_out && get_bit(sig[BREADY])) {
            b_out = false;
            bq.pop_front();
        }
        // drive the next cycle
        const int arvalid = get_bit(sig[ARVALID]), awvalid = get_bit(sig[AWVALID]);
        const int wvalid = get_bit(sig[WVALID]);
        set(ARREADY, d_arready, 1);
        set(AWREADY, d_awready, 1);
        set(WREADY, d_wready, writes.empty() ? 0 : 1);
        if (!b_out && !bq.empty()) {
            put(sig[BID], static_cast<int>(bq.front().first));
            put(sig[BRESP], static_cast<int>(bq.front().second));
            b_out = true;
        }
        set(BVALID, d_bvalid, b_out ? 1 : 0);
        if (!has_cur && !reads.empty() && reads.front().ready_at <= c) {
            cur = reads.front();
            reads.pop_front();
            has_cur = true;
        }
        if (has_cur && !r_out) read_beat();
        set(RVALID, d_rvalid, r_out ? 1 : 0);
        // asleep until a master raises a VALID (the Python model's sleep)
        if (period && reads.empty() && !has_cur && writes.empty() && bq.empty() && !b_out
            && !arvalid && !awvalid && !wvalid)
            sleep();
    }
    void write_beat() {
        const Write& w = writes.front();
        const uint64_t line_addr = (w.addr / line + w_beat) * line;
        s_vpi_value v;
        v.format = vpiVectorVal;
        vpi_get_value(sig[WSTRB], &v);
        const uint64_t strb = static_cast<uint64_t>(v.value.vector[0].aval)
                              | (line > 32 ? static_cast<uint64_t>(v.value.vector[1].aval) << 32
                                           : 0);
        if (strb) {
            vpi_get_value(sig[WDATA], &v);
            const int lo = __builtin_ctzll(strb), hi = 64 - __builtin_clzll(strb);
            const int lanes = __builtin_popcountll(strb);
            w_bytes += lanes;
            if (w_lo < 0) w_lo = static_cast<int64_t>(line_addr + lo);
            w_hi = static_cast<int64_t>(line_addr + hi);
            if (bad(line_addr + lo, hi - lo) || !contains(line_addr + lo, hi - lo)) {
                w_failed = true;
            } else {
                uint8_t* dst = mem + (line_addr - base);
                for (int i = lo; i < hi; ++i)
                    if (strb >> i & 1)
                        dst[i] = static_cast<uint8_t>(v.value.vector[i >> 2].aval >> (8 * (i & 3)));
            }
        }
        if (++w_beat == w.beats) {
            if (log)
                bursts.insert(bursts.end(), {1, w.addr, w.beats, static_cast<uint64_t>(w_lo),
                                             static_cast<uint64_t>(w_hi), w_bytes});
            w_bytes = 0;
            w_lo = w_hi = -1;
            bq.emplace_back(w.id, w_failed ? 2u : 0u);
            writes.pop_front();
            w_beat = 0;
            w_failed = false;
            ++writes_served;
        }
    }
    void read_beat() {
        const uint64_t line_addr = (cur.addr / line + cur.sent) * line;
        const uint64_t first = cur.sent == 0 ? cur.addr : line_addr;
        const uint64_t n = line_addr + line - first;
        std::fill(vec.begin(), vec.end(), s_vpi_vecval{0, 0});
        int resp = 2;
        if (!bad(first, n) && contains(first, n)) {
            const uint8_t* src = mem + (first - base);
            for (uint64_t i = first - line_addr; i < static_cast<uint64_t>(line); ++i)
                vec[i >> 2].aval |= static_cast<uint32_t>(src[i - (first - line_addr)])
                                    << (8 * (i & 3));
            resp = 0;
        }
        s_vpi_value v;
        v.format = vpiVectorVal;
        v.value.vector = vec.data();
        s_vpi_time t{};
        t.type = vpiSimTime;
        vpi_put_value(sig[RDATA], &v, &t, vpiInertialDelay);
        put(sig[RRESP], resp);
        put(sig[RID], static_cast<int>(cur.id));
        put(sig[RLAST], cur.sent == cur.beats - 1 ? 1 : 0);
        r_out = true;
    }

    static PLI_INT32 on_clk(p_cb_data data) {
        auto* m = reinterpret_cast<AxiHostMemory*>(data->user_data);
        const int v = StreamSource::get_int(m->clk);
        if (v == 1 && m->prev_clk == 0) m->edge();
        m->prev_clk = v;
        return 0;
    }
    static PLI_INT32 on_valid(p_cb_data data) {
        auto* m = reinterpret_cast<AxiHostMemory*>(data->user_data);
        if (data->value && data->value->value.integer == 1) m->wake();
        return 0;
    }
    vpiHandle watch(vpiHandle h, PLI_INT32 (*fn)(p_cb_data), s_vpi_value* value) {
        s_cb_data c{};
        c.reason = cbValueChange;
        c.cb_rtn = fn;
        c.obj = h;
        c.value = value;
        c.user_data = reinterpret_cast<PLI_BYTE8*>(this);
        return vpi_register_cb(&c);
    }
    void watch_clock() {
        if (clk_cb) return;
        prev_clk = StreamSource::get_int(clk);
        clk_cb = watch(clk, &AxiHostMemory::on_clk, &clk_value);
    }
    void sleep() {
        if (clk_cb) {
            vpi_remove_cb(clk_cb);
            clk_cb = nullptr;
        }
        asleep = true;
        if (valid_bit[0]) return;  // polled by poll_wake
        const Sig valids[3] = {ARVALID, AWVALID, WVALID};
        for (int k = 0; k < 3; ++k)
            if (!wake_cb[k]) wake_cb[k] = watch(sig[valids[k]], &AxiHostMemory::on_valid,
                                                &wake_value);
    }
    void wake() {
        asleep = false;
        for (auto& cb : wake_cb)
            if (cb) {
                vpi_remove_cb(cb);
                cb = nullptr;
            }
        watch_clock();
    }
    // Asleep on polled VALIDs and one is up: wake (as on_valid would at this check; it went to
    // sleep at an edge with all three low, so a VALID that is up has risen since). True if woken.
    bool poll_wake() {
        if (!asleep || !valid_bit[0] || !(*valid_bit[0] | *valid_bit[1] | *valid_bit[2]))
            return false;
        wake();
        return true;
    }
    void close() {
        for (auto& cb : wake_cb)
            if (cb) {
                vpi_remove_cb(cb);
                cb = nullptr;
            }
        if (clk_cb) {
            vpi_remove_cb(clk_cb);
            clk_cb = nullptr;
        }
    }
};
constexpr const char* AxiHostMemory::kNames[];

std::vector<std::unique_ptr<AxiHostMemory>> host_memories;

// Counts the callback phases in which a callback ran (cocotb's, or a C++ stream source's value-
// change callback). Only callbacks queue inertial writes or register new callbacks, so while it
// does not move there is nothing to apply and no new watcher of the clock.
uint64_t callbacks_ran = 0;

// A phase of callbacks of `reason`, when any is due (the due timed ones were moved to the
// current lists by the step's first callCbs, cbNextSimTime's). True when one ran.
bool run_cbs(uint32_t reason) {
    if (!VerilatedVpi::hasCbs(reason) || !VerilatedVpi::callCbs(reason)) return false;
    ++callbacks_ran;
    return true;
}

// Value-change callbacks may write signals that trigger more of them: run until quiet. Values
// change only by an evaluation, a VPI write or the clock's edge, so the main loop settles only
// after one of those (each call compares every watched signal with its last value). True when
// a callback ran.
// A host memory asleep on polled VALIDs is woken here, where its callbacks would run.
bool poll_host_wakes() {
    bool woke = false;
    for (const auto& m : host_memories)
        if (m && m->poll_wake()) woke = true;
    return woke;
}

bool settle() {
    bool ran = false;
    for (;;) {
        bool now = !host_memories.empty() && poll_host_wakes();
        if (VerilatedVpi::hasCbs(cbValueChange) && VerilatedVpi::callValueCbs()) now = true;
        if (!now) break;
        ran = true;
    }
    if (ran) ++callbacks_ran;
    return ran;
}

// After a phase of callbacks: settle if one ran and wrote something without delay.
void settle_after(bool ran) {
    if (ran && VerilatedVpi::evalNeeded()) settle();
}

// The writes of a step: VPI inertial puts (when a callback ran since the last time), then the
// clock's pending value. True when a value may have changed since the eval-needed flag was last
// cleared (the model must evaluate again).
uint64_t puts_checked = ~static_cast<uint64_t>(0);
bool apply_writes() {
    if (puts_checked != callbacks_ran) {
        VerilatedVpi::doInertialPuts();
        puts_checked = callbacks_ran;
    }
    bool wrote = VerilatedVpi::evalNeeded();
    if (clock_gen.pending) {
        clock_gen.write();
        wrote = true;
    }
    return wrote;
}

// The value-change callbacks after a clock edge, before the model evaluates it (cocotb's
// RisingEdge(clk) sees the values before the edge). Only the clock changed at such a point
// when no callback ran since the last one, so when that one found no watcher of the clock,
// there is still none and the check is skipped (it compares every watched signal).
uint64_t clock_unwatched_at = ~static_cast<uint64_t>(0);
void settle_edge() {
    if (clock_unwatched_at == callbacks_ran) return;
    if (!settle()) clock_unwatched_at = callbacks_ran;
}

void wrap_up() {
    VerilatedVpi::callCbs(cbEndOfSimulation);
#if VM_TRACE
    if (trace_file) trace_file->close();
#endif
}

}  // namespace

// The storage of `name` (scope.signal) when it is a public (and, for `writable`, writable)
// one-bit signal without unpacked dimensions (a CData); otherwise nullptr. Found as vpi_handle_by_name finds it: a
// signal of the top module ("card_top.clk") is the model's port in scope TOP (the module's own
// copy of the port is overwritten from it at every evaluation), any other in its own scope.
static CData* plain_bit(const char* name, bool writable = true) {
    const std::string full = name;
    const size_t dot = full.rfind('.');
    if (dot == std::string::npos) return nullptr;
    const std::string scope_name = full.substr(0, dot), base = full.substr(dot + 1);
    const VerilatedVar* var = nullptr;
    auto find = [&](const char* scope) {
        const VerilatedScope* sp = Verilated::threadContextp()->scopeFind(scope);
        if (sp) var = sp->varFind(base.c_str());
    };
    if (scope_name.find('.') == std::string::npos) find("TOP");
    if (!var) find(scope_name.c_str());
    if (!var || var->vltype() != VLVT_UINT8 || var->udims() != 0
        || (writable && !var->isPublicRW()) || var->entBits() != 1)
        return nullptr;
    return static_cast<CData*>(var->datap());
}

// Start driving `name` (a full VPI name, e.g. "card_top.clk") with a clock of `period` steps,
// `high` of them high, from now; the first value (1 when start_high) is written with the
// current step's writes. Returns 0, or -1 when the signal does not exist or is not writable, or
// the clock already runs.
extern "C" int cosim_clock_start(const char* name, uint64_t period, uint64_t high,
                                 int start_high) {
    if (clock_gen.running || period < 2 || high == 0 || high >= period) return -1;
    vpiHandle h = vpi_handle_by_name(const_cast<PLI_BYTE8*>(name), nullptr);
    if (!h) return -1;
    clock_gen.signal = h;
    clock_gen.port = plain_bit(name);
    clock_gen.period = period;
    clock_gen.high = high;
    clock_gen.value = start_high ? 1 : 0;
    clock_gen.pending = true;
    clock_gen.running = true;
    s_vpi_time now{};
    now.type = vpiSimTime;
    vpi_get_time(nullptr, &now);
    const uint64_t t = (static_cast<uint64_t>(now.high) << 32) | now.low;
    clock_gen.next_edge = t + (clock_gen.value ? high : period - high);
    return 0;
}

// 1: this model's main has the built-in clock (Python checks for the symbol).
extern "C" int cosim_clock_available(void) { return 1; }

// Play an AXI4-Stream source on the named signals (full VPI names; `reset` may be empty): a
// queue of `limit` + 1 frames, a backlog behind it. Returns its id, or -1 when a signal does not
// exist or a stream signal cannot be written.
extern "C" int cosim_stream_open(const char* clk, const char* reset, const char* tvalid,
                                 const char* tready, const char* tdata, const char* tkeep,
                                 const char* tuser, const char* tlast, int limit,
                                 int segments) {
    auto h = [](const char* name) {
        return vpi_handle_by_name(const_cast<PLI_BYTE8*>(name), nullptr);
    };
    auto s = std::make_unique<StreamSource>();
    s->clk = h(clk);
    s->reset = reset && *reset ? h(reset) : nullptr;
    s->tvalid = h(tvalid);
    s->tready = h(tready);
    s->tdata = h(tdata);
    s->tkeep = h(tkeep);
    s->tuser = h(tuser);
    s->tlast = h(tlast);
    if (!s->clk || (reset && *reset && !s->reset) || !s->tvalid || !s->tready || !s->tdata
        || !s->tkeep || !s->tuser || !s->tlast)
        return -1;
    s_vpi_value zero;
    zero.format = vpiIntVal;
    zero.value.integer = 0;
    for (vpiHandle w : {s->tvalid, s->tkeep, s->tlast})
        if (!vpi_put_value(w, &zero, nullptr, vpiNoDelay)) return -1;
    s->data_words = (vpi_get(vpiSize, s->tdata) + 31) / 32;
    s->user_words = (vpi_get(vpiSize, s->tuser) + 31) / 32;
    if (segments != 1 && segments != 2 && segments != 4) return -1;
    if (s->data_words != StreamSource::kLanes || s->user_words * 32 < StreamSource::kParity + 64)
        return -1;
    s->limit = limit;
    s->segments = segments;
    for (StreamSource::Beat* b : {&s->built, &s->staged}) {
        b->data.assign(s->data_words, s_vpi_vecval{0, 0});
        b->user.assign(s->user_words, s_vpi_vecval{0, 0});
    }
    s->clk_value.format = vpiIntVal;
    s->arm();                        // (a check that the clock takes a callback)
    if (!s->cb) return -1;
    s->disarm();
    stream_sources.push_back(std::move(s));
    return static_cast<int>(stream_sources.size() - 1);
}

// Stop playing source `id` (the end of a test): it no longer drives anything.
extern "C" void cosim_stream_close(int id) {
    if (id < 0 || id >= static_cast<int>(stream_sources.size()) || !stream_sources[id]) return;
    stream_sources[id]->disarm();
    stream_sources[id].reset();
}

// The words of a beat's tdata and tuser (32-bit, little-endian order) of source `id`.
extern "C" int cosim_stream_words(int id, int which) {
    const auto& s = stream_sources.at(id);
    return which == 0 ? s->data_words : s->user_words;
}

// Queue a completion on source `id`: `ndw` DWORDs (little-endian; descriptor and payload),
// a byte-enable nibble per DWORD as a hex digit, the last DWORD first (the Python encoding), and
// discontinue. Returns the frames moved from the backlog.
extern "C" uint64_t cosim_stream_push(int id, const uint8_t* data, int ndw, const char* be,
                                      int disc) {
    auto& s = *stream_sources.at(id);
    StreamSource::Frame frame;
    frame.dw.resize(ndw);
    std::memcpy(frame.dw.data(), data, 4 * static_cast<size_t>(ndw));
    frame.be.resize(ndw);
    for (int k = 0; k < ndw; ++k) {
        const char c = be[ndw - 1 - k];
        frame.be[k] = static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    frame.disc = disc != 0;
    s.backlog.push_back(std::move(frame));
    s.refill();
    s.arm();
    return s.moved;
}

// The beats source `id` has driven by the TLPs they carry (a part of), 0..4 (out[0..4]), and
// the segments TLPs started in (out[5], bit k: DWORD 4k).
extern "C" void cosim_stream_stats(int id, uint64_t* out) {
    const auto& s = *stream_sources.at(id);
    for (int k = 0; k < 5; ++k) out[k] = s.by_tlps[k];
    out[5] = s.starts;
}

// Hold (1) or release (0) source `id`'s beats, as the Python source's `pause`.
extern "C" void cosim_stream_pause(int id, int pause) {
    auto& s = *stream_sources.at(id);
    s.paused = pause != 0;
    s.arm();
}

// Frames moved from the backlog into the queue of source `id` so far.
extern "C" uint64_t cosim_stream_moved(int id) { return stream_sources.at(id)->moved; }

// Beats source `id` has driven so far.
extern "C" uint64_t cosim_stream_driven(int id) { return stream_sources.at(id)->driven; }

// Serve the AXI4 master port `prefix`_* (a full VPI name prefix, e.g. "card_top.m_axi_host")
// clocked by `clk` from host memory: `size` bytes at `mem`, bus addresses [base, base + size),
// reads answered `latency` cycles after their AR. Returns its id, or -1 when a signal does not
// exist or has an unexpected width.
extern "C" int cosim_axi_host_open(const char* prefix, const char* clk, uint8_t* mem,
                                   uint64_t base, uint64_t size, uint64_t latency) {
    auto m = std::make_unique<AxiHostMemory>();
    m->clk = vpi_handle_by_name(const_cast<PLI_BYTE8*>(clk), nullptr);
    if (!m->clk || !mem) return -1;
    for (int k = 0; k < AxiHostMemory::NSIG; ++k) {
        const std::string name = std::string(prefix) + "_" + AxiHostMemory::kNames[k];
        m->sig[k] = vpi_handle_by_name(const_cast<PLI_BYTE8*>(name.c_str()), nullptr);
        if (!m->sig[k]) return -1;
    }
    const int bits = vpi_get(vpiSize, m->sig[AxiHostMemory::WDATA]);
    if (bits % 32 || bits < 64 || bits > 512 || vpi_get(vpiSize, m->sig[AxiHostMemory::RDATA]) != bits
        || vpi_get(vpiSize, m->sig[AxiHostMemory::WSTRB]) * 8 != bits
        || vpi_get(vpiSize, m->sig[AxiHostMemory::ARADDR]) > 64
        || vpi_get(vpiSize, m->sig[AxiHostMemory::AWADDR]) > 64)
        return -1;
    m->line = bits / 8;
    m->words = bits / 32;
    m->vec.assign(m->words, s_vpi_vecval{0, 0});
    m->mem = mem;
    m->base = base;
    m->size = size;
    m->latency = latency;
    m->clk_value.format = vpiIntVal;
    m->wake_value.format = vpiIntVal;
    s_vpi_value zero;
    zero.format = vpiIntVal;
    zero.value.integer = 0;
    for (int k : {AxiHostMemory::ARREADY, AxiHostMemory::RVALID, AxiHostMemory::AWREADY,
                  AxiHostMemory::WREADY, AxiHostMemory::BVALID})
        if (!vpi_put_value(m->sig[k], &zero, nullptr, vpiNoDelay)) return -1;
    const char* const valid_names[3] = {"arvalid", "awvalid", "wvalid"};
    for (int k = 0; k < 3; ++k)
        m->valid_bit[k] = plain_bit((std::string(prefix) + "_" + valid_names[k]).c_str(), false);
    if (!m->valid_bit[0] || !m->valid_bit[1] || !m->valid_bit[2])
        m->valid_bit[0] = m->valid_bit[1] = m->valid_bit[2] = nullptr;
    m->watch_clock();
    if (!m->clk_cb) return -1;
    host_memories.push_back(std::move(m));
    return static_cast<int>(host_memories.size() - 1);
}

static AxiHostMemory* host_memory(int id) {
    if (id < 0 || id >= static_cast<int>(host_memories.size())) return nullptr;
    return host_memories[id].get();
}

// Stop serving (the end of a test): nothing is driven or watched any more.
extern "C" void cosim_axi_host_close(int id) {
    if (AxiHostMemory* m = host_memory(id)) {
        m->close();
        host_memories[id].reset();
    }
}

// Answer accesses that touch [start, end) with SLVERR (start == end == 0: clear all ranges).
extern "C" void cosim_axi_host_error(int id, uint64_t start, uint64_t end) {
    if (AxiHostMemory* m = host_memory(id)) {
        if (start == 0 && end == 0) m->errors.clear();
        else m->errors.emplace_back(start, end);
    }
}

// Reads and writes served, the most reads in flight, the cycles counted (out[0..3]).
extern "C" void cosim_axi_host_stats(int id, uint64_t* out) {
    if (AxiHostMemory* m = host_memory(id)) {
        out[0] = m->reads_served;
        out[1] = m->writes_served;
        out[2] = m->max_in_flight;
        out[3] = m->cycle;
    }
}

// Record bursts for cosim_axi_host_bursts (1) or not (0, the default).
extern "C" void cosim_axi_host_log(int id, int on) {
    if (AxiHostMemory* m = host_memory(id)) m->log = on != 0;
}

// Up to `max` bursts taken since the last call, six words each (kind: 0 read, 1 write; address;
// beats; a write's lowest and one-past-highest written byte and its bytes), oldest first;
// returns how many.
extern "C" int cosim_axi_host_bursts(int id, uint64_t* out, int max) {
    AxiHostMemory* m = host_memory(id);
    if (!m) return 0;
    const int n = std::min<int>(max, static_cast<int>(m->bursts.size() / 6));
    std::copy(m->bursts.begin(), m->bursts.begin() + 6 * n, out);
    m->bursts.erase(m->bursts.begin(), m->bursts.begin() + 6 * n);
    return n;
}

int main(int argc, char** argv) {
    bool trace_on = false;
    bool trace_flush = false;
    std::string trace_path;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--trace") {
            trace_on = true;
        } else if (arg == "--trace-flush") {
            trace_flush = true;
        } else if (arg == "--trace-file" && i + 1 < argc) {
            trace_path = argv[++i];
        }
    }
#if !VM_TRACE
    if (trace_on) {
        std::fprintf(stderr, "error: --trace needs a model built with tracing (waves)\n");
        return 1;
    }
#endif

    Verilated::commandArgs(argc, argv);
    std::unique_ptr<Vtop> top(new Vtop(""));
    Verilated::fatalOnVpiError(false);  // cocotb probes names that may not exist

#if VM_TRACE
    Verilated::traceEverOn(true);
    if (trace_on) {
        trace_file = new TraceFile;
        top->trace(trace_file, 99);
        trace_file->open(trace_path.empty() ? kDefaultTrace : trace_path.c_str());
    }
#endif
    (void)trace_flush;

    vlog_startup_routines_bootstrap();
    Verilated::addExitCb([](void*) { wrap_up(); }, nullptr);
    VerilatedVpi::callCbs(cbStartOfSimulation);
    ++callbacks_ran;
    settle();

    // Quiet steps (see the top of the file): quiet_at is callbacks_ran when a step ended in which
    // no callback ran and no ReadWrite, ReadOnly, NextSimTime or timed callback was due;
    // quiet_until is then the earliest timer. While callbacks_ran stays there and the time is
    // before quiet_until, those phases have nothing to do and are skipped.
    uint64_t quiet_at = ~static_cast<uint64_t>(0), quiet_until = 0;
    uint64_t step_began = callbacks_ran;  // callbacks_ran before this step's first callback
    // A step is the first at its time when the previous one was earlier: only then has its
    // NextSimTime call moved every NextSimTime callback registered before it (those of a step
    // at the same time wait for a later time), so only such a step can start quiet steps.
    bool first_at_time = true;
    while (!Verilated::gotFinish()) {
        const bool quiet = quiet_at == callbacks_ran && sim_time < quiet_until;
        bool again;
        do {
            do {
                top->eval_step();
                VerilatedVpi::clearEvalNeeded();
                const bool wrote = apply_writes();
                settle();
                again = wrote || VerilatedVpi::evalNeeded();
            } while (again);
            if (quiet && quiet_at == callbacks_ran) break;  // nothing to do below
            run_cbs(cbReadWriteSynch);
            again = apply_writes();
            if (again) settle();
        } while (again || VerilatedVpi::evalNeeded());
        top->eval_end_step();
        if (!quiet || quiet_at != callbacks_ran) {
            run_cbs(cbReadOnlySynch);
            if (first_at_time && callbacks_ran == step_began
                && !VerilatedVpi::hasCbs(cbReadWriteSynch)
                && !VerilatedVpi::hasCbs(cbReadOnlySynch)
                && !VerilatedVpi::hasCbs(cbNextSimTime) && !VerilatedVpi::hasCbs(cbAfterDelay)) {
                quiet_at = callbacks_ran;
                quiet_until = VerilatedVpi::cbNextDeadline();
            }
        }
#if VM_TRACE
        if (trace_file) {
            trace_file->dump(sim_time);
            if (trace_flush) trace_file->flush();
        }
#endif
        const bool stay_quiet = quiet_at == callbacks_ran && sim_time < quiet_until;
        uint64_t next = stay_quiet ? quiet_until : VerilatedVpi::cbNextDeadline();
        if (top->eventsPending() && top->nextTimeSlot() < next) next = top->nextTimeSlot();
        if (clock_gen.running && clock_gen.next_edge < next) next = clock_gen.next_edge;
        if (next == kNever) break;  // nothing can happen any more
        first_at_time = next != sim_time;
        sim_time = next;
        step_began = callbacks_ran;
        if (quiet_at != callbacks_ran || sim_time >= quiet_until) {
            // cbNextSimTime's phase always calls into Verilator: it moves the callbacks due now
            // from the future lists to the current ones
            if (VerilatedVpi::callCbs(cbNextSimTime)) {
                ++callbacks_ran;
                settle_after(true);
            }
            settle_after(run_cbs(cbAfterDelay));  // the timed callbacks
        }
        if (clock_gen.running && clock_gen.next_edge == sim_time) {
            clock_gen.edge(sim_time);
            apply_writes();  // the edge with the timed callbacks' writes, before evaluating
            settle_edge();
        }
    }

    top->final();
    wrap_up();
#if VM_TRACE
    delete trace_file;
    trace_file = nullptr;
#endif
    return Verilated::threadContextp()->errorCount() > 0 ? 1 : 0;
}
