# collx: plain Makefile.  `make` builds lib/libcomm.a and bin/collx-*.
# O=DIR puts every output under DIR (DIR/bin, DIR/lib, DIR/obj) so several
# builds (release, sanitizer) can live side by side.

VERSION   = 0.1.0
PREFIX   ?= /usr/local
BINDIR    = $(PREFIX)/bin
LIBDIR    = $(PREFIX)/lib
INCDIR    = $(PREFIX)/include/collx
MANDIR    = $(PREFIX)/share/man
PCDIR     = $(LIBDIR)/pkgconfig

CC       ?= cc
CFLAGS   ?= -O2 -g
PKGS      = openblas libcurl libcrypto
# PMIx, for Open MPI's mpirun and srun --mpi=pmix, when pkg-config finds it.
PMIX     := $(shell pkg-config --exists pmix 2>/dev/null && echo pmix)
PKGS     += $(PMIX)
# oneDNN, for --precision bf16: by pkg-config, else by its header (Debian's
# libdnnl-dev has no .pc file). Without it the build works and bf16 is
# refused. Its runtime is OpenMP: -lgomp for the thread count.
DNNL     := $(shell pkg-config --exists dnnl 2>/dev/null && echo pc || \
              { echo '\#include <oneapi/dnnl/dnnl.h>' | \
                $(CC) -E -x c - >/dev/null 2>&1 && echo h; })
DNNL_CFLAGS = $(if $(DNNL),-DCOLLX_DNNL $(if $(filter pc,$(DNNL)),$(shell pkg-config --cflags dnnl)))
DNNL_LIBS   = $(if $(filter pc,$(DNNL)),$(shell pkg-config --libs dnnl),$(if $(DNNL),-ldnnl)) \
              $(if $(DNNL),-lgomp)
# `make bench` and `make bench-cluster` also install the peers they compare
# with (Open MPI, iperf3; PyTorch's Gloo comes with the test packages).
BENCH_DEPS_DEB = openmpi-bin libopenmpi-dev iperf3
# `make fuzz` alone needs clang and its libFuzzer runtime.
FUZZ_DEPS_DEB = clang libclang-rt-dev
# slurmctld, slurmd, slurm-client and munge: the slurm suite's private
# single-host cluster; openmpi-bin and libpmix-dev: mpirun through PMIx.
DEPS_DEB  = build-essential pkg-config libopenblas-dev libcurl4-openssl-dev libssl-dev \
            bats mandoc python3 python3-numpy python3-torch iproute2 procps gnuplot-nox \
            valgrind slurmctld slurmd slurm-client munge openmpi-bin libpmix-dev \
            libdnnl-dev

ifdef SANITIZE
O        ?= build/san
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SANITIZE)
else
O        ?= .
endif

OBJDIR    = $(if $(filter .,$(O)),build/obj,$(O)/obj)
LIBA      = $(if $(filter .,$(O)),lib,$(O)/lib)/libcomm.a
BINOUT    = $(if $(filter .,$(O)),bin,$(O)/bin)
UNITOUT   = $(if $(filter .,$(O)),build/tests,$(O)/tests)

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
ALL_CFLAGS  = -std=c11 -D_GNU_SOURCE -DCOLLX_VERSION=\"$(VERSION)\" \
              $(if $(PMIX),-DCOLLX_PMIX) \
              $(DNNL_CFLAGS) \
              -Wall -Wextra -Ilib $(PKG_CFLAGS) $(CFLAGS)
LIBS        = $(PKG_LIBS) $(DNNL_LIBS) -lpthread -lm

LIB_SRC   := $(sort $(filter-out $(if $(PMIX),,lib/prog/pmix.c) \
               $(if $(DNNL),,lib/nn/gemm_dnnl.c),$(wildcard lib/*/*.c)))
LIB_OBJ    = $(LIB_SRC:%.c=$(OBJDIR)/%.o)
PROG_SRC  := $(sort $(wildcard bin/collx-*.c))
PROGS      = $(PROG_SRC:bin/%.c=$(BINOUT)/%)
UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNITS      = $(UNIT_SRC:tests/unit/%.c=$(UNITOUT)/%)
# Installed headers: the library's API, what a C program of its own drives
# (examples/allreduce.c): the error convention (cli/util.h); tensors and
# their files; a group, its collectives and the parameter server; the
# models; and the parallel trainers over them, with their checkpoints,
# schedules and mesh. Not installed: each folder's internals (_int.h,
# _impl.h, tensor/format.h, comm/sock.h, comm/reduce.h, comm/auth.h,
# par/dp_sync.h, par/tp_stage.h), helpers behind collx-tensor (setops,
# fillname, rng, json), and the program layer (cli/cli.h, lib/prog,
# lib/launch, lib/bench, lib/chart), whose functions may end the process,
# which the library never does. tests/install.bats checks that these
# compile on their own from an install and that no private one is there.
HEADERS   := lib/cli/util.h \
             lib/tensor/dtype.h lib/tensor/tensor.h lib/tensor/flat.h \
             lib/comm/comm.h lib/comm/coll.h lib/comm/ps.h \
             lib/nn/nn.h \
             lib/par/train_data.h lib/par/ckpt.h lib/par/dp.h lib/par/mesh.h \
             lib/par/pipe.h lib/par/pipe_sched.h lib/par/tp.h lib/par/ulysses.h
MANS      := $(sort $(wildcard man/man1/*.1 man/man7/*.7))

.PHONY: all check test demo deps install uninstall clean lint units fuzz fuzz-build \
        bench bench-cluster
.DELETE_ON_ERROR:
.SECONDARY:

# Where the build has oneDNN, bf16.bats also checks the refusal of a build
# without it: collx-dp linked with gemm.c compiled as such a build compiles
# it (libcomm.a's own gemm.o, and with it oneDNN, then never linked).
NODNNL    = $(if $(DNNL),$(UNITOUT)/nodnnl/collx-dp)

all: $(LIBA) $(PROGS) $(UNITS) $(NODNNL)

$(UNITOUT)/nodnnl/collx-dp: bin/collx-dp.c lib/nn/gemm.c $(LIBA)
	@mkdir -p $(@D)
	$(CC) $(filter-out -DCOLLX_DNNL,$(ALL_CFLAGS)) $(LDFLAGS) -o $@ \
	    bin/collx-dp.c lib/nn/gemm.c $(LIBA) $(PKG_LIBS) -lpthread -lm

$(OBJDIR)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(LIBA): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

$(BINOUT)/%: $(OBJDIR)/bin/%.o $(LIBA)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBA) $(LIBS)

$(UNITOUT)/%: $(OBJDIR)/tests/unit/%.o $(LIBA)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBA) $(LIBS)

# libFuzzer targets (tests/fuzz/fuzz_*.c): the library is built by clang
# into build/fuzz with -fsanitize=fuzzer-no-link,address,undefined and
# each target linked with -fsanitize=fuzzer; `make fuzz FUZZ_SECONDS=N`
# runs each for N seconds from its seed corpus (tests/fuzz/corpus/NAME).
FUZZ_SECONDS ?= 60
FUZZ_DIR   = build/fuzz
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZERS    = $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_DIR)/fuzz/%)

fuzz: fuzz-build
	@sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZERS)

fuzz-build:
	@sh tests/lib/deps.sh $(FUZZ_DEPS_DEB)
	@$(MAKE) --no-print-directory CC=clang O=$(FUZZ_DIR) \
	    SANITIZE=fuzzer-no-link,address,undefined $(FUZZERS)

$(O)/fuzz/%: tests/fuzz/%.c tests/fuzz/tensor_rt.h $(LIBA)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer -o $@ $< $(LIBA) $(LIBS)

-include $(LIB_OBJ:.o=.d) $(PROG_SRC:%.c=$(OBJDIR)/%.d) $(UNIT_SRC:%.c=$(OBJDIR)/%.d)

deps:
	@sh tests/lib/deps.sh $(DEPS_DEB)

check test: deps
	@$(MAKE) --no-print-directory all
	@COLLX_BIN=$(abspath $(BINOUT)) COLLX_UNITS=$(abspath $(UNITOUT)) \
	    COLLX_VALGRIND=$(VALGRIND) tests/run $(TESTS)

lint:
	mandoc -Tlint -W warning $(MANS)

demo: deps
	@$(MAKE) --no-print-directory all
	@COLLX_BIN=$(abspath $(BINOUT)) examples/demo.sh

# Benchmarks (never part of check): collx beside Gloo and Open MPI, and
# emulated clusters in network namespaces (root). Results in bench-out/.
bench: deps
	@sh tests/lib/deps.sh $(BENCH_DEPS_DEB)
	@$(MAKE) --no-print-directory all
	@COLLX_BIN=$(abspath $(BINOUT)) examples/bench.sh bench-out

bench-cluster: deps
	@sh tests/lib/deps.sh $(BENCH_DEPS_DEB)
	@$(MAKE) --no-print-directory all
	@COLLX_BIN=$(abspath $(BINOUT)) examples/bench-cluster.sh bench-out

# collx.pc: pkg-config's description of the installed library (C programs
# build with `cc prog.c $$(pkg-config --cflags --libs collx)`), written for
# this PREFIX at each install.
install: $(LIBA) $(PROGS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) \
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(PCDIR)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCDIR@|$(INCDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@LIBS@|$(LIBS)|' collx.pc.in >$(DESTDIR)$(PCDIR)/collx.pc
	chmod 644 $(DESTDIR)$(PCDIR)/collx.pc
	install -m 755 $(PROGS) $(DESTDIR)$(BINDIR)
	install -m 644 $(LIBA) $(DESTDIR)$(LIBDIR)
	for h in $(HEADERS); do \
	    install -d $(DESTDIR)$(INCDIR)/$$(dirname $${h#lib/}); \
	    install -m 644 $$h $(DESTDIR)$(INCDIR)/$${h#lib/}; done
	install -m 644 $(wildcard man/man1/*.1) $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(wildcard man/man7/*.7) $(DESTDIR)$(MANDIR)/man7

uninstall:
	rm -f $(PROGS:$(BINOUT)/%=$(DESTDIR)$(BINDIR)/%) $(DESTDIR)$(LIBDIR)/libcomm.a \
	    $(DESTDIR)$(PCDIR)/collx.pc
	rm -rf $(DESTDIR)$(INCDIR)
	rm -f $(MANS:man/%=$(DESTDIR)$(MANDIR)/%)

clean:
	rm -rf build $(PROGS) lib/libcomm.a tests/out bench-out
