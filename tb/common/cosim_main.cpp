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
// tb/common/pcie_streams.py's RcStream) plays an AXI4-Stream source in C++: Python hands it whole
// frames, already encoded as beats, and at each rising edge of the stream's clock the source
// does what the Python source would do (the card took the beat on the bus, or none is up: the
// next one goes up; TVALID drops when there is none), with no Python per beat. The edge is seen
// by a value-change callback like cocotb's RisingEdge (values before the edge is evaluated) and
// the beat is written with inertial puts, which this main applies after that evaluation (where
// cocotb applies its writes). Frames wait in a backlog until the source's queue has room (at most
// `limit` + 1 frames), and leave the queue as the Python source takes them: one beat handed over
// at a time, the next frame as soon as the previous frame's last beat is (the hard IP model's
// receive-buffer accounting follows `moved`, the frames that left the backlog).
//
// Command line (as cocotb's Verilator runner passes it): --trace, --trace-file FILE,
// --trace-flush; plusargs go to the model and cocotb.

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
    bool running = false;
    bool pending = false;   // the value below waits to be written at the next put point
    int value = 0;
    uint64_t period = 0;
    uint64_t high = 0;
    uint64_t next_edge = kNever;

    void write() {
        s_vpi_value v;
        v.format = vpiIntVal;
        v.value.integer = value;
        vpi_put_value(signal, &v, nullptr, vpiNoDelay);
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

// An AXI4-Stream source played from C++ (see the top of the file).
struct StreamSource {
    struct Beat {
        std::vector<s_vpi_vecval> data, user;
        uint32_t keep = 0;
        uint32_t last = 0;
    };
    using Frame = std::vector<Beat>;

    vpiHandle clk = nullptr, reset = nullptr, tvalid = nullptr, tready = nullptr;
    vpiHandle tdata = nullptr, tkeep = nullptr, tuser = nullptr, tlast = nullptr;
    vpiHandle cb = nullptr;          // the clock's value-change callback, while armed
    int data_words = 0, user_words = 0;
    int limit = 2;                   // the queue is full with more than `limit` frames
    std::deque<Frame> backlog;       // frames waiting for room in the queue
    std::deque<Frame> queue;         // the source's queue
    std::deque<Beat> beats;          // beats of the frame being handed over
    Beat staged;                     // the beat that goes up at the next handshake
    bool has_staged = false;
    bool valid = false;              // TVALID as driven
    bool refilling = false;
    int prev_clk = -1;
    uint64_t moved = 0;              // frames that left the backlog
    uint64_t taken = 0;              // frames that left the queue
    uint64_t driven = 0;             // beats driven
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

    bool full() const { return static_cast<int>(queue.size()) > limit; }

    void take() {                    // a frame leaves the queue: its beats are handed over
        for (Beat& b : queue.front()) beats.push_back(std::move(b));
        queue.pop_front();
        ++taken;
    }
    void stage() {
        bool took = false;
        if (!has_staged) {
            if (beats.empty()) {
                if (queue.empty()) return;
                take();
                took = true;
            }
            staged = std::move(beats.front());
            beats.pop_front();
            has_staged = true;
        }
        if (beats.empty() && !queue.empty()) {
            take();
            took = true;
        }
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
    }
    void edge() {
        if (reset && get_int(reset)) {
            if (valid) put_int(tvalid, 0);
            valid = false;
        } else if (valid && !get_int(tready)) {
            return;                  // the card holds the beat
        } else if (has_staged) {
            drive(staged);
            has_staged = false;
            if (!valid) put_int(tvalid, 1);
            valid = true;
            stage();
        } else if (valid) {
            put_int(tvalid, 0);
            valid = false;
        }
        if (!valid && !has_staged && beats.empty() && queue.empty() && backlog.empty())
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

// Value-change callbacks may write signals that trigger more of them: run until quiet.
void settle() {
    while (VerilatedVpi::callValueCbs()) {
    }
}

// The writes of a step: VPI inertial puts, then the clock's pending value.
void apply_writes() {
    VerilatedVpi::doInertialPuts();
    if (clock_gen.pending) clock_gen.write();
}

void wrap_up() {
    VerilatedVpi::callCbs(cbEndOfSimulation);
#if VM_TRACE
    if (trace_file) trace_file->close();
#endif
}

}  // namespace

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
                                 const char* tuser, const char* tlast, int limit) {
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
    s->limit = limit;
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

// Queue a frame of `nbeats` beats on source `id`: per beat tdata, tuser (little-endian, whole
// 32-bit words), tkeep, tlast (a 32-bit word each). Returns the frames moved from the backlog.
extern "C" uint64_t cosim_stream_push(int id, const uint8_t* buf, int nbeats) {
    auto& s = *stream_sources.at(id);
    StreamSource::Frame frame(nbeats);
    const uint8_t* p = buf;
    auto word = [&p]() {
        uint32_t w;
        std::memcpy(&w, p, 4);
        p += 4;
        return w;
    };
    for (auto& b : frame) {
        b.data.resize(s.data_words);
        b.user.resize(s.user_words);
        for (auto& w : b.data) w = s_vpi_vecval{word(), 0};
        for (auto& w : b.user) w = s_vpi_vecval{word(), 0};
        b.keep = word();
        b.last = word();
    }
    s.backlog.push_back(std::move(frame));
    s.refill();
    s.arm();
    return s.moved;
}

// Frames moved from the backlog into the queue of source `id` so far.
extern "C" uint64_t cosim_stream_moved(int id) { return stream_sources.at(id)->moved; }

// Beats source `id` has driven so far.
extern "C" uint64_t cosim_stream_driven(int id) { return stream_sources.at(id)->driven; }

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
    settle();

    while (!Verilated::gotFinish()) {
        do {
            do {
                top->eval_step();
                VerilatedVpi::clearEvalNeeded();
                apply_writes();
                settle();
            } while (VerilatedVpi::evalNeeded());
            VerilatedVpi::callCbs(cbReadWriteSynch);
            apply_writes();
            settle();
        } while (VerilatedVpi::evalNeeded());
        top->eval_end_step();
        VerilatedVpi::callCbs(cbReadOnlySynch);
#if VM_TRACE
        if (trace_file) {
            trace_file->dump(sim_time);
            if (trace_flush) trace_file->flush();
        }
#endif
        uint64_t next = VerilatedVpi::cbNextDeadline();
        if (top->eventsPending() && top->nextTimeSlot() < next) next = top->nextTimeSlot();
        if (clock_gen.running && clock_gen.next_edge < next) next = clock_gen.next_edge;
        if (next == kNever) break;  // nothing can happen any more
        sim_time = next;
        VerilatedVpi::callCbs(cbNextSimTime);
        settle();
        VerilatedVpi::callTimedCbs();
        settle();
        if (clock_gen.running && clock_gen.next_edge == sim_time) {
            clock_gen.edge(sim_time);
            apply_writes();  // the edge with the timed callbacks' writes, before evaluating
            settle();
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
