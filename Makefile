# Makefile -- spillway's front door.  On a fresh Debian machine
#
#   make demo     bootstrap, build, then `spillway info` and `spillway demo`
#   make test     bootstrap, build (plain, ASan+UBSan, TSan, libFuzzer), run every suite
#
# each install whatever is missing (system packages through apt, a Python
# venv with the pinned build tools) and then configure, build and run.
# Other targets: build, bench, bootstrap, clean, distclean, help.
#
# Build directories, all configured with the venv's meson:
#   build/        debugoptimized                          (make build, demo)
#   build-asan/   + AddressSanitizer and UndefinedBehaviorSanitizer
#   build-tsan/   + ThreadSanitizer
#   build-release/ release, no assertions                  (make bench)
#   build-fuzz/   clang, ASan+UBSan, the library instrumented for libFuzzer:
#                 the fuzz targets (make fuzz; docs/testing.md)
# Suite logs go to build/logs/NAME.log.

.DEFAULT_GOAL := build
MAKEFLAGS += --no-print-directory
SHELL := /bin/bash

PYTHON ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.requirements.stamp
MESON := $(VENV)/bin/meson
NINJA := $(VENV)/bin/ninja

# The venv's tools come first (meson looks for ninja on PATH).
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PYTHON

MESON_OPTS :=
ASAN_OPTS := -Db_sanitize=address,undefined -Db_lundef=false \
             -Dc_args=-fno-omit-frame-pointer
TSAN_OPTS := -Db_sanitize=thread -Db_lundef=false
RELEASE_OPTS := --buildtype=release -Db_ndebug=true

TEST_BIN := tests/c/test_spillway
# intercept_tls_get_addr=0: up to GCC 13 and LLVM 16 (Debian's 12 and 14
# here), the sanitizer runtime takes a dynamic TLS block that lands 16
# bytes into a page for glibc < 2.25's header and reads the two words
# before it; LeakSanitizer's tracer then faults at exit ("Tracer caught
# signal 11", an abort with no leak).  A library dlopen()ed with
# _Thread_local data (the CUDA stand-in's per-thread context stack, PoCL)
# makes such blocks: c-cuda-fake-asan lost 2 tests to it in CI.
LSAN_TLS := intercept_tls_get_addr=0
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:$(LSAN_TLS) \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV := TSAN_OPTIONS="halt_on_error=1 detect_deadlocks=1 second_deadlock_stack=1"

# ---------------------------------------------------------------------------
# Test suites: one line each, NAME 'bash command'.  Each command must end
# its output with "N passed, N failed[, N skipped]" (pytest's summary line
# is read too) and exit non-zero on failure; exiting 77 with no summary
# means "not applicable here" (see scripts/if-device.sh, if-tests.sh).
# scripts/run-suites.sh runs them in order, logs each to build/logs/NAME.log,
# and ends with a table and the total line.  `make test SUITES="c c-tsan"`
# runs only those.
# ---------------------------------------------------------------------------
ALL_SUITES =
ALL_SUITES += c         'SW_TEST_DEVICE=sim:0 build/$(TEST_BIN)'
ALL_SUITES += c-asan    'SW_TEST_DEVICE=sim:0 $(ASAN_ENV) build-asan/$(TEST_BIN)'
ALL_SUITES += c-tsan    'SW_TEST_DEVICE=sim:0 $(TSAN_ENV) scripts/tsan-exec.sh build-tsan/$(TEST_BIN) thread'
# The sim runs small work at once on an idle queue (src/backend/sim.c,
# SIM__INLINE_MAX); here everything goes through its workers, so that the
# ordering of small work is checked asynchronously too.
ALL_SUITES += c-sim-queued 'SW_TEST_DEVICE=sim:0 SPILLWAY_SIM_INLINE=0 build/$(TEST_BIN)'
# OpenCL (PoCL in CI): the whole suite, plain and under ASan+UBSan, and the
# thread tests under TSan; "not run" where `spillway devices` lists no
# opencl:0.  LeakSanitizer skips what PoCL and LLVM keep for the process's
# life (tests/sanitizers/lsan-pocl.supp, docs/opencl.md).  And ASan keeps
# no alternate signal stack of its own: PoCL's LLVM, compiling kernels on
# a thread, swaps in a larger one it mallocs, which ASan then fails to
# unmap when the thread exits ("unable to unmap", an abort).
POCL_LSAN := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:use_sigaltstack=0:$(LSAN_TLS) \
             LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan-pocl.supp:print_suppressions=0
ALL_SUITES += c-opencl  'scripts/if-device.sh opencl:0 build/$(TEST_BIN)'
ALL_SUITES += c-opencl-asan '$(ASAN_ENV) $(POCL_LSAN) scripts/if-device.sh opencl:0 build-asan/$(TEST_BIN)'
ALL_SUITES += c-opencl-tsan '$(TSAN_ENV) scripts/if-device.sh opencl:0 scripts/tsan-exec.sh build-tsan/$(TEST_BIN) thread'
# Python (tests/python): the build tree's package (conftest.py finds it in
# $SPILLWAY_BUILD_DIR/python), on the default device, under ASan+UBSan (the
# sanitizer runtimes preloaded into the uninstrumented interpreter; Python's
# own allocations at exit are not leaks to report), and on OpenCL where
# present.  "not run" when a build has no extension (no Python headers).
PY_SUITE = scripts/if-tests.sh tests/python env $(1) $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/python
PY_BUILT = [[ -d $(1)/python/spillway ]] || { echo "no Python extension in $(1)/ (Python headers missing?)"; exit 77; };
ASAN_PRELOAD = $$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)
ALL_SUITES += python    '$(call PY_BUILT,build) $(call PY_SUITE,SPILLWAY_BUILD_DIR=build)'
ALL_SUITES += python-asan '$(call PY_BUILT,build-asan) $(call PY_SUITE,SPILLWAY_BUILD_DIR=build-asan LD_PRELOAD="$(ASAN_PRELOAD)" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)'
ALL_SUITES += python-opencl '$(call PY_BUILT,build) scripts/if-device.sh opencl:0 $(call PY_SUITE,SPILLWAY_BUILD_DIR=build SPILLWAY_DEVICE=opencl:0)'
# The command-line program (tests/cli): build/spillway run as a user would.
ALL_SUITES += cli       'SPILLWAY_BUILD_DIR=build $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/cli'
# The installed package (scripts/test-installed.sh): the sdist, a wheel
# built from it and installed with [dask,plot,test] into a fresh venv, where
# the Python suite, the entry points, the program and the Python examples
# run; and a C program and examples/quickstart.c built with pkg-config
# alone against `meson install`.
ALL_SUITES += installed 'scripts/test-installed.sh'
# Bring your own device: examples/backend/membank.c built against the
# installed headers with pkg-config alone, loaded through SPILLWAY_BACKENDS
# by the generic C suite, the fuzzer, `spillway info` and the Python
# module (scripts/test-backend-example.sh, docs/backends.md).
ALL_SUITES += c-backend-example 'scripts/test-backend-example.sh build'
# CUDA: the backend's host side through CPU stand-ins for libcuda.so.1 and
# NVRTC (tests/cuda/; not a GPU, not a compiler), the whole suite on
# cuda:0, plain and under ASan+UBSan.  The stand-in for NVRTC always goes
# with the one for the driver, so that these suites do not depend on
# whether the machine has an NVRTC.  With an NVIDIA GPU, the C and Python
# suites on the real cuda:0 with the real NVRTC ("not run" elsewhere).
# docs/cuda.md.
CUDA_FAKE = SPILLWAY_CUDA_LIBRARY=$(1)/tests/c/libcuda_fake.so SPILLWAY_NVRTC_LIBRARY=$(1)/tests/c/libnvrtc_fake.so
# The stand-ins unless $SPILLWAY_CUDA_LIBRARY names a driver (make fuzz, soak).
CUDA_FAKE_DEFAULT = $(if $(SPILLWAY_CUDA_LIBRARY),,$(call CUDA_FAKE,$(1)))
ALL_SUITES += c-cuda-fake '$(call CUDA_FAKE,build) SW_TEST_DEVICE=cuda:0 build/$(TEST_BIN)'
ALL_SUITES += c-cuda-fake-asan '$(call CUDA_FAKE,build-asan) SW_TEST_DEVICE=cuda:0 $(ASAN_ENV) build-asan/$(TEST_BIN)'
ALL_SUITES += c-cuda    'scripts/if-device.sh cuda:0 build/$(TEST_BIN)'
ALL_SUITES += python-cuda '$(call PY_BUILT,build) scripts/if-device.sh cuda:0 $(call PY_SUITE,SPILLWAY_BUILD_DIR=build SPILLWAY_DEVICE=cuda:0)'
# HIP: the backend's host side through CPU stand-ins for the ROCm runtime
# and hipRTC (tests/hip/; not a GPU), the whole suite on hip:0, plain and
# under ASan+UBSan; with an AMD GPU, the C and Python suites on the real
# hip:0 ("not run" elsewhere).  docs/hip.md.
HIP_FAKE = SPILLWAY_HIP_LIBRARY=$(1)/tests/c/libamdhip64_fake.so SPILLWAY_HIPRTC_LIBRARY=$(1)/tests/c/libhiprtc_fake.so
ALL_SUITES += c-hip-fake '$(call HIP_FAKE,build) SW_TEST_DEVICE=hip:0 build/$(TEST_BIN)'
ALL_SUITES += c-hip-fake-asan '$(call HIP_FAKE,build-asan) SW_TEST_DEVICE=hip:0 $(ASAN_ENV) build-asan/$(TEST_BIN)'
ALL_SUITES += c-hip     'scripts/if-device.sh hip:0 build/$(TEST_BIN)'
ALL_SUITES += python-hip '$(call PY_BUILT,build) scripts/if-device.sh hip:0 $(call PY_SUITE,SPILLWAY_BUILD_DIR=build SPILLWAY_DEVICE=hip:0)'
# Level Zero: the backend's host side through a CPU stand-in for the loader
# with one GPU behind it (tests/ze/; not a GPU), the whole suite on ze:0,
# plain and under ASan+UBSan ("not run" in a build without the SPIR-V
# kernels: clang and llvm-spirv); with an Intel GPU, the C and Python
# suites on the real ze:0.  docs/level-zero.md.
ZE_SPIRV = [[ -f $(1)/ze_fp64.spv ]] || { echo "no SPIR-V kernels in $(1)/ (clang and llvm-spirv were not found): the ze suites need them"; exit 77; };
ALL_SUITES += c-ze-fake '$(call ZE_SPIRV,build) SPILLWAY_ZE_LIBRARY=build/tests/c/libze_loader_fake.so SW_TEST_DEVICE=ze:0 build/$(TEST_BIN)'
ALL_SUITES += c-ze-fake-asan '$(call ZE_SPIRV,build-asan) SPILLWAY_ZE_LIBRARY=build-asan/tests/c/libze_loader_fake.so SW_TEST_DEVICE=ze:0 $(ASAN_ENV) build-asan/$(TEST_BIN)'
ALL_SUITES += c-ze      'scripts/if-device.sh ze:0 build/$(TEST_BIN)'
ALL_SUITES += python-ze '$(call PY_BUILT,build) scripts/if-device.sh ze:0 $(call PY_SUITE,SPILLWAY_BUILD_DIR=build SPILLWAY_DEVICE=ze:0)'
# The host backend (host:0, the process's own memory, accounting only:
# docs/host.md): the whole C suite, plain and under ASan+UBSan, and the
# Python suite, on the host's real memory.  Tests that need spilling skip
# themselves there (host:0 never spills).
ALL_SUITES += c-host    'SW_TEST_DEVICE=host:0 build/$(TEST_BIN)'
ALL_SUITES += c-host-asan 'SW_TEST_DEVICE=host:0 $(ASAN_ENV) build-asan/$(TEST_BIN)'
ALL_SUITES += python-host '$(call PY_BUILT,build) $(call PY_SUITE,SPILLWAY_BUILD_DIR=build SPILLWAY_DEVICE=host:0)'
# The model-based fuzzer (tests/fuzz, docs/testing.md): fixed-seed,
# time-boxed libFuzzer runs from the committed seeds under ASan+UBSan (two
# sim devices; OpenCL beside a sim device, where present; CUDA through the
# CPU stand-in beside a sim device; host:0, which never spills, beside a sim
# device), the threaded variant under TSan (its
# plain replayer: libFuzzer's coverage counters are themselves a data race
# to TSan), and the plain replayers in the normal build.  "not run" where
# build-fuzz/ could not be made (no clang with libFuzzer).
FUZZ_RUN := tests/fuzz/run.sh
FUZZ_SEEDS := tests/fuzz/seeds
FUZZ_BIN := build-fuzz/tests/fuzz
FUZZ_CI_RUNS ?= 400
FUZZ_CI_TIME ?= 15
FUZZ_CI = -seed=1 -runs=$(FUZZ_CI_RUNS) -max_total_time=$(FUZZ_CI_TIME) -max_len=4096
ALL_SUITES += fuzz-sim  'FUZZ_DEVICES=sim:0,sim:1 $(ASAN_ENV) $(FUZZ_RUN) $(FUZZ_BIN)/fuzz_spillway $(FUZZ_SEEDS)/spillway $(FUZZ_CI)'
ALL_SUITES += fuzz-opencl '$(ASAN_ENV) $(POCL_LSAN) scripts/if-device.sh opencl:0 env FUZZ_DEVICES=opencl:0,sim:0 FUZZ_REOPEN=8 $(FUZZ_RUN) $(FUZZ_BIN)/fuzz_spillway $(FUZZ_SEEDS)/spillway $(FUZZ_CI)'
ALL_SUITES += fuzz-cuda-fake '$(call CUDA_FAKE,build-fuzz) FUZZ_DEVICES=cuda:0,sim:0 $(ASAN_ENV) $(FUZZ_RUN) $(FUZZ_BIN)/fuzz_spillway $(FUZZ_SEEDS)/spillway $(FUZZ_CI)'
ALL_SUITES += fuzz-host 'FUZZ_DEVICES=host:0,sim:0 $(ASAN_ENV) $(FUZZ_RUN) $(FUZZ_BIN)/fuzz_spillway $(FUZZ_SEEDS)/spillway $(FUZZ_CI)'
ALL_SUITES += fuzz-tsan 'FUZZ_DEVICES=sim:0,sim:1 $(TSAN_ENV) scripts/tsan-exec.sh $(FUZZ_RUN) build-tsan/tests/fuzz/fuzz_spillway_threads_replay $(FUZZ_SEEDS)/threads -seed=1 -runs=40 -max_total_time=$(FUZZ_CI_TIME)'
ALL_SUITES += fuzz-replay '$(FUZZ_RUN) build/tests/fuzz/fuzz_spillway_replay $(FUZZ_SEEDS)/spillway -seed=1 -runs=50'
ALL_SUITES += fuzz-replay-mt '$(FUZZ_RUN) build/tests/fuzz/fuzz_spillway_threads_replay $(FUZZ_SEEDS)/threads -seed=1 -runs=10'
# The same inputs with the sim's workers shaken (SPILLWAY_SIM_JITTER: a
# random pause before each command, nothing inline): copies and events
# finish late, in orders the usual timing never shows.  A timeline bug
# that survived every plain replay here failed this at once.
ALL_SUITES += fuzz-jitter 'SPILLWAY_SIM_JITTER=50 $(FUZZ_RUN) build/tests/fuzz/fuzz_spillway_replay $(FUZZ_SEEDS)/spillway -seed=2 -runs=50'
ALL_SUITES += fuzz-jitter-mt 'SPILLWAY_SIM_JITTER=50 FUZZ_DEVICES=sim:0,sim:1 $(FUZZ_RUN) build/tests/fuzz/fuzz_spillway_threads_replay $(FUZZ_SEEDS)/threads -seed=2 -runs=20'
# spillway as a PyTorch device (scripts/test-torch.sh, docs/torch.md): a
# venv of its own, .venv-torch, with torch==2.13.0 (the CPU build this
# machine kind keeps on disk; never in requirements.txt: any other torch
# pulls a CUDA build of several GB), a wheel of this checkout built there
# without build isolation (so the C++ layer is in it; build-torch/ is its
# build folder), installed, and tests/torch run against it from an empty
# folder.  "not run" where torch 2.13.0 is not on the machine's disk.
ALL_SUITES += torch     'scripts/test-torch.sh'
# Free-threaded CPython 3.13t (scripts/test-python-ft.sh), late in the
# list: its interpreters build in the background from the start
# (scripts/prepare-suites.sh), about 15 minutes of one core.  The interpreter,
# built once from Debian trixie's source package into .python-ft/ (about
# 3.5 CPU-minutes, then reused), a venv of it, build-ft/, and the Python
# suite with the GIL checked off after `import spillway` and at the end.
ALL_SUITES += python-ft 'MESON_OPTS="$(MESON_OPTS)" scripts/test-python-ft.sh'
# The same under ThreadSanitizer: a second interpreter built
# --with-thread-sanitizer (.python-ft-tsan/, about 5.5 CPU-minutes, 10.5
# minutes of wall time on 2 cores, once), build-ft-tsan/ with
# -Db_sanitize=thread, and the tests where threads share spillway objects;
# a report fails the suite (CPython's own suppression list only).
ALL_SUITES += python-ft-tsan 'FT_TSAN=1 MESON_OPTS="$(MESON_OPTS)" scripts/test-python-ft.sh'
# The soak (tests/soak), briefly: `make soak DURATION=10m` runs it longer.
# Here with every small command through the sim's workers (its buffers
# are small: inline, most would run on the caller), so that its threads'
# work interleaves asynchronously; `make soak` runs the default.
ALL_SUITES += soak      'SPILLWAY_SIM_INLINE=0 build/tests/soak/spillway-soak --duration 10s --seed 1 --epoch 1'
SUITES ?=

# ---------------------------------------------------------------------------

.PHONY: all build build-asan build-tsan build-release build-all test demo bench bootstrap \
        coverage-hostoom build-fuzz build-fuzz-all fuzz fuzz-campaign soak \
        system venv clean distclean help

all: build

help:
	@echo "make demo       bootstrap, build, show devices and run the demo"
	@echo "make test       bootstrap, build (plain, ASan+UBSan, TSan, libFuzzer), run every suite"
	@echo "make build      bootstrap and build build/ (the default)"
	@echo "make bench      release build, then run the benchmarks in build-release/bench"
	@echo "                and bench/bench_python.py, bench_queues.py, bench_interop.py,"
	@echo "                bench_dask.py"
	@echo "make bootstrap  install missing system packages and the venv only"
	@echo "make coverage-hostoom  which host-allocation failure paths the fault tests reach"
	@echo "make fuzz       run the libFuzzer target until interrupted (FUZZ_TIME=seconds,"
	@echo "                FUZZ_TARGET=fuzz_spillway|fuzz_spillway_threads, FUZZ_DEVICES=sim:0,sim:1);"
	@echo "                its corpus grows in tests/fuzz/corpus/"
	@echo "make fuzz-campaign  the fuzzer on every device and variant, FUZZ_CAMPAIGN_TIME=300 s each"
	@echo "make soak       the soak (DURATION=10m, SOAK_DEVICE=sim:0, SOAK_THREADS=4, SOAK_FAULTS=1)"
	@echo "make clean      remove the build directories (keeps .venv)"
	@echo "make distclean  clean, and remove the venvs, the free-threaded Pythons and caches"
	@echo "variables: SUITES=\"c c-tsan\" runs a subset of the suites;"
	@echo "           PYTHON=python3 makes the venv; SW_SUITE_TIMEOUT=1800 (s)"

# --- bootstrap --------------------------------------------------------------

# Cheap when everything is there: probes and dpkg-query, no apt.
system:
	@scripts/bootstrap-system.sh

# Redone only when requirements.txt changes.
$(VENV_STAMP): requirements.txt | system
	@scripts/bootstrap-venv.sh $(VENV) requirements.txt $@

venv: $(VENV_STAMP)

bootstrap: system venv

# --- configure and build ----------------------------------------------------

# Reconfigured when the venv (so meson) or this file (so the options)
# changes; ninja regenerates by itself when a meson.build changes.
build/build.ninja: $(VENV_STAMP) Makefile | system
	@MESON=$(MESON) scripts/configure.sh build $(MESON_OPTS)
	@touch $@

build-asan/build.ninja: $(VENV_STAMP) Makefile | system
	@MESON=$(MESON) scripts/configure.sh build-asan $(MESON_OPTS) $(ASAN_OPTS)
	@touch $@

build-tsan/build.ninja: $(VENV_STAMP) Makefile | system
	@MESON=$(MESON) scripts/configure.sh build-tsan $(MESON_OPTS) $(TSAN_OPTS)
	@touch $@

# Benchmarks measure what users run: a release build without assertions.
build-release/build.ninja: $(VENV_STAMP) Makefile | system
	@MESON=$(MESON) scripts/configure.sh build-release $(MESON_OPTS) $(RELEASE_OPTS)
	@touch $@

build: build/build.ninja
	$(NINJA) -C build

build-asan: build-asan/build.ninja
	$(NINJA) -C build-asan

build-tsan: build-tsan/build.ninja
	$(NINJA) -C build-tsan

build-release: build-release/build.ninja
	$(NINJA) -C build-release

build-all: build build-asan build-tsan

# The fuzz targets: clang with libFuzzer, ASan+UBSan, the whole library
# instrumented for coverage (-fsanitize=fuzzer-no-link), only what the
# fuzz suites run built.  Where clang cannot link libFuzzer, build-fuzz-all
# says so and the fuzz suites report "not run".
FUZZ_CC ?= clang
FUZZ_OPTS := -Dfuzz=enabled -Dpython=disabled -Db_lundef=false \
             -Db_sanitize=address,undefined \
             '-Dc_args=-fsanitize=fuzzer-no-link -fno-omit-frame-pointer'
FUZZ_TARGETS := tests/fuzz/fuzz_spillway tests/fuzz/fuzz_spillway_threads \
                tests/c/libcuda_fake.so tests/c/libnvrtc_fake.so

build-fuzz/build.ninja: $(VENV_STAMP) Makefile | system
	@CC=$(FUZZ_CC) MESON=$(MESON) scripts/configure.sh build-fuzz $(MESON_OPTS) $(FUZZ_OPTS)
	@touch $@

build-fuzz: build-fuzz/build.ninja
	$(NINJA) -C build-fuzz $(FUZZ_TARGETS)

build-fuzz-all: | system
	@if printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
	    $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1; then \
	  $(MAKE) build-fuzz; \
	else \
	  echo "make: $(FUZZ_CC) cannot link libFuzzer (-fsanitize=fuzzer): the fuzz suites will not run"; \
	fi

# --- run --------------------------------------------------------------------

# The slowest builds -- the free-threaded interpreters, the torch wheel --
# go on in the background while the first suites run on one core
# (scripts/prepare-suites.sh); their suites wait for them.
test: build-all build-fuzz-all
	@MESON_OPTS="$(MESON_OPTS)" scripts/prepare-suites.sh $(SUITES) & prep=$$!; \
	SW_SUITES="$(SUITES)" scripts/run-suites.sh $(ALL_SUITES); rc=$$?; \
	wait $$prep; exit $$rc

# Open-ended fuzzing: until interrupted, or FUZZ_TIME seconds.  New inputs
# go to tests/fuzz/corpus/TARGET/ (not committed; the seeds are
# tests/fuzz/seeds/), crash inputs to build/fuzz-artifacts/TARGET/.
# FUZZ_JOBS=N runs N fuzzers on the corpus in parallel.
FUZZ_TARGET ?= fuzz_spillway
FUZZ_TIME ?= 0
FUZZ_JOBS ?= 1
FUZZ_DEVICES ?= sim:0,sim:1
fuzz: build-fuzz-all
	@seeds=$(FUZZ_SEEDS)/$(if $(findstring threads,$(FUZZ_TARGET)),threads,spillway); \
	FUZZ_CORPUS=tests/fuzz/corpus/$(FUZZ_TARGET) FUZZ_DEVICES=$(FUZZ_DEVICES) \
	$(ASAN_ENV) $(POCL_LSAN) \
	$(call CUDA_FAKE_DEFAULT,build-fuzz) \
	$(FUZZ_RUN) $(FUZZ_BIN)/$(FUZZ_TARGET) $$seeds -max_total_time=$(FUZZ_TIME) \
	  -max_len=4096 $(if $(filter-out 1,$(FUZZ_JOBS)),-jobs=$(FUZZ_JOBS) -workers=$(FUZZ_JOBS))

# The fuzzer across every device and variant here, FUZZ_CAMPAIGN_TIME
# seconds each (18 configurations, FUZZ_CAMPAIGN_JOBS at once), and a table
# of what each ran and found (scripts/fuzz-campaign.sh).  FUZZ_CAMPAIGN_CPU=N
# runs each for N CPU seconds instead, in pieces of FUZZ_CAMPAIGN_TIME.
FUZZ_CAMPAIGN_TIME ?= 300
FUZZ_CAMPAIGN_JOBS ?= 2
fuzz-campaign: build-all build-fuzz-all
	@scripts/fuzz-campaign.sh $(FUZZ_CAMPAIGN_TIME) $(FUZZ_CAMPAIGN_JOBS)

# The soak: worker threads under a moving budget, every byte checked, the
# device checked whole every epoch and empty at the end.
# SOAK_FAULTS=1 also injects device faults under the workers' feet.
DURATION ?= 10m
SOAK_DEVICE ?= sim:0
SOAK_THREADS ?= 4
SOAK_FAULTS ?= 0
soak: build
	$(call CUDA_FAKE_DEFAULT,build) \
	build/tests/soak/spillway-soak --duration $(DURATION) --device $(SOAK_DEVICE) \
	  --threads $(SOAK_THREADS) --faults $(SOAK_FAULTS)

demo: build
	build/spillway info
	build/spillway demo

bench: build-release
	@found=0; \
	for b in build-release/bench/*; do \
	  if [[ -f $$b && -x $$b ]]; then found=1; echo "== $$b"; "$$b" || exit 1; fi; \
	done; \
	if [[ $$found == 0 ]]; then \
	  echo "make bench: no benchmark programs in build-release/bench"; \
	fi
	@if [[ -d build-release/python/spillway ]]; then \
	  echo "== bench/bench_python.py"; \
	  $(VENV)/bin/python bench/bench_python.py --build build-release; \
	  echo "== bench/bench_queues.py"; \
	  $(VENV)/bin/python bench/bench_queues.py --build build-release; \
	  echo "== bench/bench_interop.py"; \
	  $(VENV)/bin/python bench/bench_interop.py --build build-release; \
	  echo "== bench/bench_dask.py"; \
	  $(VENV)/bin/python bench/bench_dask.py --build build-release; \
	  echo "== bench/bench_pinned.py"; \
	  $(VENV)/bin/python bench/bench_pinned.py --build build-release; \
	  echo "== bench/bench_threads.py: the GIL build, then free-threaded 3.13t"; \
	  $(VENV)/bin/python bench/bench_threads.py --build build-release \
	    --json build-release/bench-threads-gil.json && \
	  ftpy=$$(MESON_OPTS="$(MESON_OPTS)" scripts/ft-build.sh build-ft-release $(RELEASE_OPTS) | tail -n 1) && \
	  $$ftpy bench/bench_threads.py --build build-ft-release \
	    --json build-release/bench-threads-ft.json && \
	  $(VENV)/bin/python bench/bench_threads.py --compare \
	    build-release/bench-threads-gil.json build-release/bench-threads-ft.json; \
	fi
	@if [[ -x .venv-torch/bin/python ]]; then \
	  echo "== bench/bench_torch.py (.venv-torch: the torch suite's wheel)"; \
	  .venv-torch/bin/python bench/bench_torch.py; \
	else \
	  echo "== bench/bench_torch.py: no .venv-torch (make test SUITES=torch makes it)"; \
	fi

# Every SW_ERR_HOST_OOM return of the core reached by the host-allocation
# fault tests, shown line by line from a gcov build (build-cov/).
coverage-hostoom: venv
	@scripts/coverage-hostoom.sh sim:0

# --- clean ------------------------------------------------------------------

clean:
	rm -rf build build-asan build-tsan build-release build-cov build-fuzz \
	       build-ft build-ft-tsan build-ft-release build-torch

# The free-threaded interpreters (.python-ft*, minutes to rebuild) go too.
distclean: clean
	rm -rf $(VENV) .venv-ft .venv-ft-tsan .venv-torch .python-ft .python-ft-tsan
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
	find . -name '*.pyc' -delete
