# idem: rehearse the idempotency of a background job. See README.md.

VERSION = 0.1.0
PREFIX = /usr/local
MANPREFIX = $(PREFIX)/share/man
BINDIR = $(PREFIX)/bin
# the built-in queue adapters, examples for a team's own (idem-sandbox(1))
QUEUEDIR = $(PREFIX)/share/idem/queues
DESTDIR =

CC = cc
PKGS = libpq yaml-0.1 libgit2 libsodium jansson libmicrohttpd libcurl zlib libcrypto libprotobuf-c
SANITIZE =
ifeq ($(SANITIZE),1)
BUILD = build/sanitize
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD = build/release
SANFLAGS =
endif
BIN = $(BUILD)/bin

CPPFLAGS = -D_GNU_SOURCE -DIDEM_VERSION='"$(VERSION)"' -Ilib -I$(OTLP_GEN)
CFLAGS = -std=c11 -O2 -g -Wall -Wextra -Werror $(SANFLAGS) $(shell pkg-config --cflags $(PKGS))
# each program loads only the libraries it calls: fewer to map at start
LDFLAGS = $(SANFLAGS) -Wl,--as-needed
LDLIBS = $(shell pkg-config --libs $(PKGS)) -lm -pthread

PROGS = idem-sandbox seed-gen seed-sanitize dup-publish idem-worker kill-at count-effects mkrecord verify-record rehearse queue-check
# A program with private modules has a room of its own, cmd/PROG/, whose
# main file is cmd/PROG/PROG.c; its other modules make an archive that the
# tests link too. The others are one file, cmd/PROG.c. lib/ is what two or
# more programs share.
ROOMS = kill-at mkrecord verify-record seed-sanitize count-effects rehearse queue-check
LIBOBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard lib/*.c))
room_src = $(filter-out cmd/$(1)/$(1).c,$(wildcard cmd/$(1)/*.c))
ROOMLIB = $(foreach r,$(ROOMS),$(BUILD)/cmd/$(r)/$(r).a)
HEADERS = lib/*.h cmd/*/*.h
# The subset of OTLP's trace schema that kill-at's span receiver decodes
# (cmd/kill-at/otlp/*.proto): its C is made by protoc-c at build time, for
# every build, and never committed; the room's archive holds its objects.
OTLP_PROTO = $(wildcard cmd/kill-at/otlp/*.proto)
OTLP_GEN = build/gen/otlp
OTLP_SRC = $(patsubst cmd/kill-at/otlp/%.proto,$(OTLP_GEN)/%.pb-c.c,$(OTLP_PROTO))
ROOMGEN_kill-at = $(patsubst $(OTLP_GEN)/%.c,$(BUILD)/gen/otlp/%.o,$(OTLP_SRC))
# Files built into the objects (lib/embed.h).
EMBEDDED_lib/queue = lib/queues/*.sql
EMBEDDED_cmd/idem-sandbox = lib/queue.sql
EMBEDDED_cmd/seed-gen = templates/seed.yaml templates/ticket.md
EMBEDDED_cmd/mkrecord/mkrecord = templates/handoff.md
EMBEDDED_cmd/kill-at/failpoint = lib/ledger.sql cmd/kill-at/failpoint.sql
EMBEDDED_cmd/queue-check/check = lib/ledger.sql
UNIT = tsv text file seed template sig yamljson pg map record queue timeline handoff step plan dsse statement trace
FUZZ = tsv seed record sshsig signers key template vendor sanitize step sql otlp adapter
FUZZ_SECONDS = 60
FUZZ_CC = clang
FUZZ_FLAGS = -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
MAN1 = $(addsuffix .1,$(PROGS))
MAN5 = idem-tsv.5 idem-seed.5 idem-record.5
MAN7 = idem-step.7 idem.7

# Debian packages that building, the tests and the demo need.
DEBS = make gcc libc6-dev pkg-config libpq-dev libssl-dev libyaml-dev libgit2-dev libsodium-dev libmicrohttpd-dev \
	libjansson-dev postgresql postgresql-client bats python3 man-db groff-base \
	openssh-client git libcurl4-openssl-dev curl jq python3-yaml zlib1g-dev time \
	libprotobuf-c-dev protobuf-c-compiler
# node and npm for the workers written with node-postgres (tests/node): any
# node on PATH will do; Debian's is installed only when there is none.
NODE_DEBS = nodejs npm
# Referees of the tests: Chromium draws the record's timeline as a browser
# would; strace sees what mkrecord reads and syncs; faketime moves the
# clock; mandoc lints the pages; psycopg2 for the quick start's worker
# (examples/python); securesystemslib and PyNaCl check and sign the in-toto
# statement's envelope outside idem (tests/intoto.bats, /usr/bin/python3).
CHECK_DEBS = chromium strace faketime mandoc python3-psycopg2 python3-securesystemslib python3-nacl
BENCH_DEBS = hyperfine
FUZZ_DEBS = clang libclang-rt-14-dev

all: $(addprefix $(BIN)/,$(PROGS))

$(BUILD)/lib/libidem.a: $(LIBOBJ)
	rm -f $@ && ar rcs $@ $(LIBOBJ)

.SECONDEXPANSION:
$(BUILD)/%.o: %.c $(HEADERS) $$(wildcard $$(EMBEDDED_$$*))
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(OTLP_GEN)/.made: $(OTLP_PROTO)
	@mkdir -p $(@D)
	protoc-c --c_out=$(@D) -Icmd/kill-at/otlp $(OTLP_PROTO)
	@touch $@
$(OTLP_SRC) $(OTLP_SRC:.c=.h): $(OTLP_GEN)/.made ;
$(BUILD)/gen/otlp/%.o: $(OTLP_GEN)/%.c $(OTLP_GEN)/.made
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(BUILD)/cmd/kill-at/otlp.o build/fuzz/cmd/kill-at/otlp.o: $(OTLP_GEN)/.made

define room
$(BUILD)/cmd/$(1)/$(1).a: $(patsubst %.c,$(BUILD)/%.o,$(call room_src,$(1))) $(ROOMGEN_$(1))
	rm -f $$@ && ar rcs $$@ $$^
$(BIN)/$(1): $(BUILD)/cmd/$(1)/$(1).o $(BUILD)/cmd/$(1)/$(1).a $(BUILD)/lib/libidem.a
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) -o $$@ $$^ $$(LDLIBS)
endef
$(foreach r,$(ROOMS),$(eval $(call room,$(r))))

$(BIN)/%: $(BUILD)/cmd/%.o $(BUILD)/lib/libidem.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Unit tests, fuzz harnesses and test tools reach a room's modules as
# "PROG/module.h" (-Icmd), and link every room's archive.
TESTFLAGS = -Icmd $(CPPFLAGS) $(CFLAGS) $(LDFLAGS)
$(BUILD)/tests/%_test: tests/unit/%_test.c tests/unit/unit.h $(HEADERS) $(ROOMLIB) $(BUILD)/lib/libidem.a
	@mkdir -p $(@D)
	$(CC) -Itests/unit $(TESTFLAGS) -o $@ $< $(ROOMLIB) $(BUILD)/lib/libidem.a $(LDLIBS)

# Fuzz harnesses: the replay build runs their corpora in make check with the
# normal compiler; make fuzz builds them with clang and libFuzzer.
$(BUILD)/fuzz/%_replay: tests/fuzz/%.c tests/fuzz/replay.c tests/fuzz/scratch.c tests/fuzz/fuzz.h \
		$(HEADERS) $(ROOMLIB) $(BUILD)/lib/libidem.a
	@mkdir -p $(@D)
	$(CC) -Itests/fuzz $(TESTFLAGS) -o $@ tests/fuzz/$*.c tests/fuzz/replay.c \
		tests/fuzz/scratch.c $(ROOMLIB) $(BUILD)/lib/libidem.a $(LDLIBS)

# the same archives as the tests link, of objects built for libFuzzer
FUZZLIB = $(patsubst $(BUILD)/%,build/fuzz/%,$(ROOMLIB)) build/fuzz/lib/libidem.a
build/fuzz/lib/libidem.a: $(patsubst $(BUILD)/%,build/fuzz/%,$(LIBOBJ))
	rm -f $@ && ar rcs $@ $^
$(foreach r,$(ROOMS),$(eval build/fuzz/cmd/$(r)/$(r).a: \
	$(patsubst %.c,build/fuzz/%.o,$(call room_src,$(r))) \
	$(patsubst $(BUILD)/%,build/fuzz/%,$(ROOMGEN_$(r))); rm -f $$@ && ar rcs $$@ $$^))
build/fuzz/gen/otlp/%.o: $(OTLP_GEN)/%.c $(OTLP_GEN)/.made
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link \
		$(shell pkg-config --cflags $(PKGS)) -c -o $@ $<
build/fuzz/%.o: %.c $(HEADERS) $$(wildcard $$(EMBEDDED_$$*))
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link \
		$(shell pkg-config --cflags $(PKGS)) -c -o $@ $<

build/fuzz/%: tests/fuzz/%.c tests/fuzz/scratch.c tests/fuzz/fuzz.h $(HEADERS) $(FUZZLIB)
	$(FUZZ_CC) -Icmd $(CPPFLAGS) -Itests/fuzz $(FUZZ_FLAGS) -fsanitize=fuzzer \
		$(shell pkg-config --cflags $(PKGS)) -o $@ tests/fuzz/$*.c tests/fuzz/scratch.c \
		$(FUZZLIB) $(LDLIBS)

# Runs every harness for FUZZ_SECONDS on its corpus; new inputs go to
# build/fuzz/corpus, findings to build/fuzz/findings, and any finding fails.
fuzz: deps
	@$(MAKE) --no-print-directory EXTRA_DEBS="$(FUZZ_DEBS)" deps
	@$(MAKE) --no-print-directory $(addprefix build/fuzz/,$(FUZZ))
	@FUZZ="$(FUZZ)" FUZZ_SECONDS="$(FUZZ_SECONDS)" tests/fuzz/run

# Programs that only the command tests run, beside the real ones.
TEST_TOOLS = signers-check peer-of failpoint-kill mermaid-check evidence-join

$(BUILD)/tests/%: tests/tools/%.c $(HEADERS) $(ROOMLIB) $(BUILD)/lib/libidem.a
	@mkdir -p $(@D)
	$(CC) $(TESTFLAGS) -o $@ $< $(ROOMLIB) $(BUILD)/lib/libidem.a $(LDLIBS)

test: $(addprefix $(BUILD)/tests/,$(TEST_TOOLS))

# node-postgres for the tests' workers, and Mermaid's parser in jsdom for the
# handoff's timeline, exactly as the committed lockfile says.
tests/node/node_modules/.package-lock.json: tests/node/package.json tests/node/package-lock.json
	npm ci --prefix tests/node --no-audit --no-fund
	@touch $@

# Installs missing Debian packages when run as root; otherwise names them.
deps:
	@missing=""; for p in $(DEBS) $(EXTRA_DEBS); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || \
		missing="$$missing $$p"; \
	done; \
	command -v node >/dev/null && command -v npm >/dev/null || missing="$$missing $(NODE_DEBS)"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing Debian packages:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing Debian packages; run: sudo apt-get update && sudo apt-get install -y$$missing" >&2; \
			exit 2; \
		fi; \
	fi

# The README's test command: unit tests, then command tests against a real
# PostgreSQL started by the tests themselves.
check:
	@$(MAKE) --no-print-directory EXTRA_DEBS="$(CHECK_DEBS)" deps
	@$(MAKE) --no-print-directory test

test: all $(addprefix $(BUILD)/tests/,$(addsuffix _test,$(UNIT))) \
		$(addprefix $(BUILD)/fuzz/,$(addsuffix _replay,$(FUZZ))) tests/node/node_modules/.package-lock.json
	@BIN="$(CURDIR)/$(BIN)" BUILD="$(CURDIR)/$(BUILD)" UNIT="$(UNIT)" FUZZ="$(FUZZ)" tests/run

# The README's main command.
demo: deps
	@$(MAKE) --no-print-directory all $(BUILD)/tests/mermaid-check
	@BIN="$(CURDIR)/$(BIN)" BUILD="$(CURDIR)/$(BUILD)" tests/demo

bench: deps
	@$(MAKE) --no-print-directory EXTRA_DEBS="$(BENCH_DEBS)" deps all tests/node/node_modules/.package-lock.json
	@BIN="$(CURDIR)/$(BIN)" tests/bench/run

install: all
	mkdir -p $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANPREFIX)/man1 $(DESTDIR)$(MANPREFIX)/man5 \
		$(DESTDIR)$(MANPREFIX)/man7
	for p in $(PROGS); do cp -f $(BIN)/$$p $(DESTDIR)$(BINDIR)/$$p; chmod 755 $(DESTDIR)$(BINDIR)/$$p; done
	for m in $(MAN1); do cp -f man/$$m $(DESTDIR)$(MANPREFIX)/man1/$$m; chmod 644 $(DESTDIR)$(MANPREFIX)/man1/$$m; done
	for m in $(MAN5); do cp -f man/$$m $(DESTDIR)$(MANPREFIX)/man5/$$m; chmod 644 $(DESTDIR)$(MANPREFIX)/man5/$$m; done
	for m in $(MAN7); do cp -f man/$$m $(DESTDIR)$(MANPREFIX)/man7/$$m; chmod 644 $(DESTDIR)$(MANPREFIX)/man7/$$m; done
	mkdir -p $(DESTDIR)$(QUEUEDIR)
	for q in lib/queues/*.sql; do cp -f $$q $(DESTDIR)$(QUEUEDIR)/; chmod 644 $(DESTDIR)$(QUEUEDIR)/$${q##*/}; done

uninstall:
	for p in $(PROGS); do rm -f $(DESTDIR)$(BINDIR)/$$p; done
	for m in $(MAN1); do rm -f $(DESTDIR)$(MANPREFIX)/man1/$$m; done
	for m in $(MAN5); do rm -f $(DESTDIR)$(MANPREFIX)/man5/$$m; done
	for m in $(MAN7); do rm -f $(DESTDIR)$(MANPREFIX)/man7/$$m; done
	for q in lib/queues/*.sql; do rm -f $(DESTDIR)$(QUEUEDIR)/$${q##*/}; done
	-rmdir $(DESTDIR)$(QUEUEDIR) $(DESTDIR)$(PREFIX)/share/idem 2>/dev/null

clean:
	rm -rf build

.PHONY: all deps check test demo bench fuzz install uninstall clean
.SECONDARY:
