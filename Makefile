# DNN accelerator card co-simulation: see README.md.
#   make sim     the main run (today: the card-memory demo); SIM=verilator|icarus CARD_MEM=1G
#   make test    unit tests and the RTL regression on Verilator and Icarus
#   make lint    verilator --lint-only -Wall on every RTL top, ruff, generated-file check
#   make waves   open the latest FST in GTKWave with its bench's save file
#   make bench   benchmarks (printed summary + JSON in bench/results/)
#   make compare a benchmark at BASE=<commit> beside this tree, in one run (BENCH=e2e)
#   make gen     regenerate rtl/include/ from the Python spec
#   make sweep   a design-space sweep: SPEC=file (default the shipped example), SCHEDULER=tcp://..

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
RUN := tools/venv-run
JOBS ?= 2
# Every block's top module (rtl/<block>/<block>.v), linted with all RTL sources visible
RTL_SRCS := $(wildcard rtl/*/*.v)
RTL_TOPS := $(foreach d,$(wildcard rtl/*/),$(if $(wildcard $(d)$(notdir $(d:/=)).v),$(notdir $(d:/=))))

.PHONY: all sim test lint waves bench compare gen sweep venv clean distclean

all: test

# The venv is (re)built when missing or older than the pinned dependency list.
$(STAMP): pyproject.toml requirements.lock
	@echo "setting up $(VENV) (pinned: requirements.lock)"
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install -c requirements.lock -e . > $(VENV)/install.log 2>&1 \
	  || { cat $(VENV)/install.log; exit 1; }
	@touch $@

venv: $(STAMP)

sim: $(STAMP)
	@tools/ensure-system-deps fst
	@$(RUN) python -m tb.sim

# the FST tests need liblz4-dev as make sim does (a fresh machine may lack it)
test: $(STAMP)
	@tools/ensure-system-deps fst
	@$(RUN) python -m pytest -n $(JOBS) --dist worksteal --durations=25 tests

lint: $(STAMP)
	@$(RUN) python -m pyhost.spec.gen --check
	@for top in $(RTL_TOPS); do \
	  echo "verilator --lint-only -Wall $$top"; \
	  $(RUN) verilator --lint-only -Wall -Irtl/include --top-module $$top rtl/lint.vlt \
	    $(RTL_SRCS) || exit 1; \
	done
	@$(RUN) ruff check .
	@echo "lint clean"

waves: $(STAMP)
	@tools/ensure-system-deps gtkwave
	@$(RUN) python -m tb.common.waves

bench: $(STAMP)
	@$(RUN) python -m bench $(BENCH)

# The same benchmark at an older commit beside this tree in one run: BENCH=e2e BASE=main REPEAT=1
compare: $(STAMP)
	@$(RUN) python -m bench.compare --base $(or $(BASE),main) --repeat $(or $(REPEAT),1) $(BENCH)

gen: $(STAMP)
	@$(RUN) python -m pyhost.spec.gen

SPEC ?= tb/sweep/examples/example.yaml
sweep: $(STAMP)
	@$(RUN) python -m tb.sweep $(SPEC) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) \
	  $(if $(WORKERS),--workers $(WORKERS)) $(SWEEP_ARGS)

clean:
	rm -rf sim_build bench/results .pytest_cache .ruff_cache

distclean: clean
	rm -rf $(VENV) *.egg-info
