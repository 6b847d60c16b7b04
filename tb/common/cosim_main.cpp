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
// Command line (as cocotb's Verilator runner passes it): --trace, --trace-file FILE,
// --trace-flush; plusargs go to the model and cocotb.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

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
