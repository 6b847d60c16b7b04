// Pure C++ Verilator harness of card_top for the accelerator benchmark (bench/accel_bench.py).
//
// No Python in the loop: the harness runs a job script that bench/accel_bench.py generates from
// pyhost.spec.regs (the harness itself knows no register offset or bit), then writes a JSON
// result. It is built from the same RTL with the same Verilator flags as the cocotb model.
//
// Usage: accel_harness <job script> <result json>
//
// Script commands, one per line ('#' starts a comment; numbers are decimal or 0x hex):
//   memory <vpi name> <bytes>      the card memory array (backdoor) and the bytes of one entry
//   load <file> <addr>             copy a file into card memory at addr (entry aligned)
//   clock_ps <ps>                  clock period (simulated time only; the model has no delays)
//   reset <hold> <settle>          rst high for hold cycles, then low for settle cycles
//   expect <name> <offset> <value> BAR0 read that must return value
//   write <name> <offset> <value>  BAR0 write (AXI4-Lite, all strobes)
//   start <name> <offset> <value>  BAR0 write; the measured window opens when it completes
//   wait_irq <max cycles>          tick until irq is high; the window closes there
//   read <name> <offset>           BAR0 read, reported under name
//   dump <file> <addr> <size>      card memory [addr, addr+size) to a file
//
// The window is timed like the cocotb side times it: from the B response of the start write to
// the first clock edge after which irq is high.

#include <chrono>
#include <cinttypes>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

namespace {

using Clock = std::chrono::steady_clock;

// CPU time of the process (the figure that a busy shared machine disturbs least).
double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Cycles an AXI-Lite handshake may take before the harness gives up.
constexpr uint64_t kBusTimeout = 100000;

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

uint64_t number(const std::string& s) {
    char* end = nullptr;
    const uint64_t v = std::strtoull(s.c_str(), &end, 0);
    if (s.empty() || *end != '\0') fail("not a number: '" + s + "'");
    return v;
}

class Harness {
  public:
    explicit Harness(int argc, char** argv) : ctx_(new VerilatedContext), top_(nullptr) {
        ctx_->commandArgs(argc, argv);
        top_.reset(new Vtop{ctx_.get(), ""});
        top_->clk = 0;
        top_->rst = 1;
        idle_bus();
        top_->eval();  // initial blocks (the DRAM array is zeroed here, before any load)
    }

    ~Harness() { top_->final(); }

    void set_period_ps(uint64_t ps) {
        if (ps < 2) fail("clock period must be at least 2 ps");
        half_ps_ = ps / 2;
    }

    // One clock cycle: rising edge, then falling edge. Inputs set before the call are sampled
    // at the rising edge.
    void tick() {
        top_->clk = 1;
        ctx_->timeInc(half_ps_);
        top_->eval();
        top_->clk = 0;
        ctx_->timeInc(half_ps_);
        top_->eval();
        ++cycles_;
    }

    void reset(uint64_t hold, uint64_t settle) {
        top_->rst = 1;
        for (uint64_t i = 0; i < hold; ++i) tick();
        top_->rst = 0;
        for (uint64_t i = 0; i < settle; ++i) tick();
    }

    void write(uint32_t offset, uint32_t value) {
        top_->s_axil_awaddr = offset;
        top_->s_axil_awvalid = 1;
        top_->s_axil_wdata = value;
        top_->s_axil_wstrb = 0xF;
        top_->s_axil_wvalid = 1;
        top_->s_axil_bready = 1;
        bool aw = false, w = false, b = false;
        for (uint64_t n = 0; !b; ++n) {
            if (n > kBusTimeout) fail("BAR0 write: no handshake/response");
            top_->eval();  // settle the ready/valid outputs for the current inputs
            const bool aw_hs = top_->s_axil_awvalid && top_->s_axil_awready;
            const bool w_hs = top_->s_axil_wvalid && top_->s_axil_wready;
            const bool b_hs = top_->s_axil_bvalid && top_->s_axil_bready;
            const uint32_t bresp = top_->s_axil_bresp;
            tick();
            if (aw_hs) { aw = true; top_->s_axil_awvalid = 0; }
            if (w_hs) { w = true; top_->s_axil_wvalid = 0; }
            if (b_hs) {
                if (!(aw && w)) fail("BAR0 write: B before AW and W");
                if (bresp != 0) fail("BAR0 write: BRESP " + std::to_string(bresp));
                b = true;
            }
        }
        idle_bus();
    }

    uint32_t read(uint32_t offset) {
        top_->s_axil_araddr = offset;
        top_->s_axil_arvalid = 1;
        top_->s_axil_rready = 1;
        uint32_t data = 0;
        for (uint64_t n = 0;; ++n) {
            if (n > kBusTimeout) fail("BAR0 read: no handshake/response");
            top_->eval();
            const bool ar_hs = top_->s_axil_arvalid && top_->s_axil_arready;
            const bool r_hs = top_->s_axil_rvalid && top_->s_axil_rready;
            const uint32_t rdata = top_->s_axil_rdata;
            const uint32_t rresp = top_->s_axil_rresp;
            tick();
            if (ar_hs) top_->s_axil_arvalid = 0;
            if (r_hs) {
                if (rresp != 0) fail("BAR0 read: RRESP " + std::to_string(rresp));
                data = rdata;
                break;
            }
        }
        idle_bus();
        return data;
    }

    // Ticks until irq is high; returns false after max_cycles.
    bool wait_irq(uint64_t max_cycles) {
        for (uint64_t n = 0; !top_->irq; ++n) {
            if (n >= max_cycles) return false;
            tick();
        }
        return true;
    }

    uint64_t cycles() const { return cycles_; }

  private:
    void idle_bus() {
        top_->s_axil_awvalid = 0;
        top_->s_axil_wvalid = 0;
        top_->s_axil_bready = 0;
        top_->s_axil_arvalid = 0;
        top_->s_axil_rready = 0;
        // host memory port: nothing answers (the job does not use the DMA engine)
        top_->m_axi_host_arready = 0;
        top_->m_axi_host_rvalid = 0;
        top_->m_axi_host_awready = 0;
        top_->m_axi_host_wready = 0;
        top_->m_axi_host_bvalid = 0;
    }

    std::unique_ptr<VerilatedContext> ctx_;
    std::unique_ptr<Vtop> top_;
    uint64_t half_ps_ = 1250;
    uint64_t cycles_ = 0;
};

// Card memory by VPI: entries of `bytes` bytes, byte i of an entry at bits [8i +: 8] (the
// little-endian order of card memory).
class Backdoor {
  public:
    Backdoor(const std::string& name, uint64_t bytes) : bytes_(bytes) {
        if (bytes == 0 || bytes % 4) fail("memory entry bytes must be a multiple of 4");
        std::string path = name;
        array_ = vpi_handle_by_name(const_cast<PLI_BYTE8*>(path.c_str()), nullptr);
        if (!array_) {
            path = "TOP." + name;
            array_ = vpi_handle_by_name(const_cast<PLI_BYTE8*>(path.c_str()), nullptr);
        }
        if (!array_) fail("no VPI object " + name + " (is the model built with --vpi and "
                          "--public-flat-rw?)");
        entries_ = static_cast<uint64_t>(vpi_get(vpiSize, array_));
        const uint64_t width = static_cast<uint64_t>(vpi_get(vpiSize, word(0)));
        if (width != 8 * bytes) fail(name + ": entries are " + std::to_string(width) +
                                     " bits, the job says " + std::to_string(8 * bytes) + " bytes");
    }

    void load(uint64_t addr, const std::vector<uint8_t>& data) {
        check(addr, data.size());
        std::vector<s_vpi_vecval> vec(bytes_ / 4);
        for (uint64_t off = 0; off < data.size(); off += bytes_) {
            for (uint64_t k = 0; k < bytes_ / 4; ++k) {
                uint32_t v = 0;
                for (uint64_t b = 0; b < 4; ++b) {
                    const uint64_t i = off + 4 * k + b;
                    v |= static_cast<uint32_t>(i < data.size() ? data[i] : 0) << (8 * b);
                }
                vec[k].aval = v;
                vec[k].bval = 0;
            }
            s_vpi_value val;
            val.format = vpiVectorVal;
            val.value.vector = vec.data();
            vpi_put_value(word((addr + off) / bytes_), &val, nullptr, vpiNoDelay);
        }
    }

    std::vector<uint8_t> dump(uint64_t addr, uint64_t size) {
        check(addr, size);
        std::vector<uint8_t> out(size);
        for (uint64_t off = 0; off < size; off += bytes_) {
            s_vpi_value val;
            val.format = vpiVectorVal;
            vpi_get_value(word((addr + off) / bytes_), &val);
            for (uint64_t i = 0; i < bytes_ && off + i < size; ++i)
                out[off + i] = static_cast<uint8_t>(val.value.vector[i / 4].aval >> (8 * (i % 4)));
        }
        return out;
    }

  private:
    vpiHandle word(uint64_t index) {
        vpiHandle h = vpi_handle_by_index(array_, static_cast<PLI_INT32>(index));
        if (!h) fail("no memory entry " + std::to_string(index));
        return h;
    }

    void check(uint64_t addr, uint64_t size) const {
        if (addr % bytes_) fail("memory address " + std::to_string(addr) + " is not entry aligned");
        if ((addr + size + bytes_ - 1) / bytes_ > entries_) fail("memory range beyond the array");
    }

    vpiHandle array_ = nullptr;
    uint64_t bytes_;
    uint64_t entries_ = 0;
};

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open " + path);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::vector<uint8_t>& data) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!f) fail("cannot write " + path);
}

struct Result {
    double wall_s = 0;
    double cpu_s = 0;
    uint64_t window_cycles = 0;
    double total_wall_s = 0;
    uint64_t total_cycles = 0;
    std::vector<std::pair<std::string, uint32_t>> reads;
};

void write_json(const std::string& path, const Result& r) {
    std::ofstream f(path);
    f << "{\n  \"window_cycles\": " << r.window_cycles << ",\n  \"wall_s\": " << r.wall_s
      << ",\n  \"cycles_per_s\": " << (r.wall_s > 0 ? r.window_cycles / r.wall_s : 0)
      << ",\n  \"cpu_s\": " << r.cpu_s << ",\n  \"cycles_per_cpu_s\": "
      << (r.cpu_s > 0 ? r.window_cycles / r.cpu_s : 0)
      << ",\n  \"total_cycles\": " << r.total_cycles << ",\n  \"total_wall_s\": "
      << r.total_wall_s << ",\n  \"reads\": {";
    for (size_t i = 0; i < r.reads.size(); ++i)
        f << (i ? ",\n" : "\n") << "    \"" << r.reads[i].first << "\": " << r.reads[i].second;
    f << "\n  }\n}\n";
    if (!f) fail("cannot write " + path);
}

Result run(Harness& h, std::istream& script) {
    Result res;
    std::unique_ptr<Backdoor> mem;
    Clock::time_point t0;
    double cpu0 = 0;
    bool started = false, waited = false;
    const Clock::time_point t_begin = Clock::now();
    std::string line;
    for (int lineno = 1; std::getline(script, line); ++lineno) {
        const std::string where = "line " + std::to_string(lineno) + ": ";
        std::istringstream in(line.substr(0, line.find('#')));
        std::vector<std::string> a;
        for (std::string tok; in >> tok;) a.push_back(tok);
        if (a.empty()) continue;
        const std::string& cmd = a[0];
        auto need = [&](size_t n) {
            if (a.size() != n + 1)
                fail(where + cmd + " takes " + std::to_string(n) + " arguments");
        };
        if (cmd == "memory") {
            need(2);
            mem.reset(new Backdoor(a[1], number(a[2])));
        } else if (cmd == "load" || cmd == "dump") {
            if (!mem) fail(where + cmd + " before memory");
            if (cmd == "load") {
                need(2);
                mem->load(number(a[2]), read_file(a[1]));
            } else {
                need(3);
                write_file(a[1], mem->dump(number(a[2]), number(a[3])));
            }
        } else if (cmd == "clock_ps") {
            need(1);
            h.set_period_ps(number(a[1]));
        } else if (cmd == "reset") {
            need(2);
            h.reset(number(a[1]), number(a[2]));
        } else if (cmd == "expect") {
            need(3);
            const uint32_t v = h.read(static_cast<uint32_t>(number(a[2])));
            if (v != number(a[3]))
                fail(where + a[1] + " reads " + std::to_string(v) + ", expected " + a[3]);
        } else if (cmd == "write" || cmd == "start") {
            need(3);
            h.write(static_cast<uint32_t>(number(a[2])), static_cast<uint32_t>(number(a[3])));
            if (cmd == "start") {
                started = true;
                res.window_cycles = h.cycles();
                cpu0 = cpu_seconds();
                t0 = Clock::now();
            }
        } else if (cmd == "wait_irq") {
            need(1);
            if (!started) fail(where + "wait_irq before start");
            if (!h.wait_irq(number(a[1])))
                fail(where + "no interrupt within " + a[1] + " cycles");
            res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
            res.cpu_s = cpu_seconds() - cpu0;
            res.window_cycles = h.cycles() - res.window_cycles;
            waited = true;
        } else if (cmd == "read") {
            need(2);
            res.reads.emplace_back(a[1], h.read(static_cast<uint32_t>(number(a[2]))));
        } else {
            fail(where + "unknown command '" + cmd + "'");
        }
    }
    if (!waited) fail("the script never waited for the interrupt");
    res.total_cycles = h.cycles();
    res.total_wall_s = std::chrono::duration<double>(Clock::now() - t_begin).count();
    return res;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s <job script> <result json>\n", argv[0]);
        return 2;
    }
    try {
        std::ifstream script(argv[1]);
        if (!script) fail(std::string("cannot open ") + argv[1]);
        Harness h(argc, argv);
        const Result r = run(h, script);
        write_json(argv[2], r);
        std::printf("%" PRIu64 " cycles in %.3f s: %.0f cycles/s\n", r.window_cycles, r.wall_s,
                    r.window_cycles / r.wall_s);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "accel_harness: %s\n", e.what());
        return 1;
    }
    return 0;
}
