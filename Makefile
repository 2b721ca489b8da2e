# delayq -- a plain Makefile. `make` builds bin/delayqd and bin/delayq,
# `make run` starts the server, `make test` runs every test under ASan+UBSan.
# Missing Debian packages are installed first by scripts/deps.sh.

.DEFAULT_GOAL := all
CC      ?= cc
PYTHON  := /usr/bin/python3
PKGS    := libevent hiredis jansson libcurl libcrypto
WARN    := -Wall -Wextra -Werror -Wformat=2 -Wshadow -Wno-unused-parameter \
           -Wstrict-prototypes -Wmissing-prototypes
CFLAGS  := -std=gnu11 -g -O2 $(WARN) -Isrc -Iinclude -D_GNU_SOURCE
LDLIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# The layers (DESIGN §5), bottom up. Each is an archive, linked top layer
# first: a lower layer that called into a higher one would not link. The
# include rule is checked too (`make layers`): a file includes headers of
# its own layer and the layers below only.
LAYERS     := lib proto engine store core push front
# Every source file is named here: a file that is not listed is not built.
lib_SRC    := $(addprefix src/lib/,base64.c buf.c clock.c crc32c.c duration.c hist.c \
                htab.c listen.c log.c slab.c url.c wheel.c xalloc.c) src/job.c
proto_SRC  := src/proto/resp.c
engine_SRC := src/engine/engine.c src/engine/engine_far.c src/engine/engine_load.c
store_SRC  := $(addprefix src/store/,store.c result.c \
                embedded.c embedded_mem.c embedded_repair.c \
                tier.c tier_check.c wal.c wal_codec.c wal_compact.c wal_replay.c wal_sync.c \
                redis.c redis_arena.c redis_client.c redis_ev.c redis_plan.c redis_rec.c redis_reply.c redis_sched.c \
                redis_sentinel.c redis_url.c)
core_SRC   := $(addprefix src/core/,core.c metrics.c push_note.c snapshot.c wait.c)
push_SRC   := src/push/push.c
front_SRC  := $(addprefix src/front/,resp/commands.c resp/conn.c resp/listener.c \
                http/http_front.c http/routes.c http/http_json.c http/dash_routes.c \
                http/prom.c dashboard/dashboard.c)
SERVER_SRC := src/server/server.c src/server/config.c
CLI_SRC    := $(addprefix src/cli/,delayq.c render.c work.c bench.c bench_report.c bench_conn.c bench_hist.c)
CLIENT_SRC := src/client/client.c src/client/worker.c

# --- embedded files: sources in their own language, turned into C ---------
# Every file listed in EMBED (a path under src/) becomes build/gen/PATH.c,
# holding `const char asset_NAME[]` (its bytes and a NUL) and
# `const size_t asset_NAME_len`, NAME being PATH with '/' and '.' as '_'
# (src/store/lua/delayq.lua -> asset_store_lua_delayq_lua). The generated
# .c file joins the layer of the directory it comes from.
DASH_ASSETS := $(wildcard src/front/dashboard/assets/*)
EMBED      := src/store/lua/delayq.lua $(DASH_ASSETS)
EMBED_C    := $(patsubst src/%,build/gen/%.c,$(EMBED))
.SECONDARY: $(EMBED_C)
build/gen/%.c: src/% scripts/embed
	@mkdir -p $(dir $@)
	scripts/embed asset_$(subst -,_,$(subst .,_,$(subst /,_,$*))) < $< > $@.tmp && mv $@.tmp $@
# The Redis store's script is one library written in two files: far.lua (its
# far tier) is appended to delayq.lua.
LUA_SCRIPT := src/store/lua/delayq.lua src/store/lua/far.lua
build/gen/store/lua/delayq.lua.c: $(LUA_SCRIPT) scripts/embed
	@mkdir -p $(dir $@)
	cat $(LUA_SCRIPT) | scripts/embed asset_store_lua_delayq_lua > $@.tmp && mv $@.tmp $@
store_SRC  += $(filter build/gen/store/%,$(EMBED_C))
front_SRC  += $(filter build/gen/front/%,$(EMBED_C))

CORE_SRC   := $(foreach l,$(LAYERS),$($(l)_SRC)) $(SERVER_SRC)
UNIT_TESTS := test_bench_hist test_client test_core test_crc32c test_dashboard test_duration \
              test_engine test_hist test_htab test_http_json test_model test_push \
              test_redis_arena test_redis_rec test_redis_url test_resp test_result test_slab test_tier test_wal \
              test_wheel

obj = $(patsubst build/gen/%.c,build/$(1)/gen/%.o,$(patsubst src/%.c,build/$(1)/%.o,$(2)))
# The archives of a build kind, top layer first (the link order).
archives = $(foreach l,front push core store engine proto lib,build/$(1)/libdq_$(l).a)

define layer_rules
build/rel/libdq_$(1).a: $$(call obj,rel,$$($(1)_SRC))
	@rm -f $$@ && ar rcs $$@ $$^
build/asan/libdq_$(1).a: $$(call obj,asan,$$($(1)_SRC))
	@rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach l,$(LAYERS),$(eval $(call layer_rules,$(l))))

.PHONY: all run test unit integration fuzz bench clean deps layers
all: layers bin/delayqd bin/delayq libdelayq

layers:
	@scripts/check-layers

build/.deps-build: scripts/deps.sh
	@scripts/deps.sh build
	@mkdir -p build && touch $@
build/.deps-test: scripts/deps.sh
	@scripts/deps.sh test
	@mkdir -p build && touch $@

# --- release build -------------------------------------------------------
build/rel/%.o: src/%.c | build/.deps-build
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<
build/rel/gen/%.o: build/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

bin/delayqd: $(call obj,rel,$(SERVER_SRC) src/server/main.c) $(call archives,rel)
	@mkdir -p bin
	$(CC) -o $@ $^ $(LDLIBS)
bin/delayq: $(call obj,rel,$(CLI_SRC) $(CLIENT_SRC)) build/rel/libdq_proto.a build/rel/libdq_lib.a
	@mkdir -p bin
	$(CC) -pthread -o $@ $^ $(LDLIBS)

run: all
	./bin/delayqd --bind 127.0.0.1 --port 7700

# --- test build: ASan + UBSan --------------------------------------------
build/asan/%.o: src/%.c | build/.deps-test
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O1 $(SAN) -MMD -MP -c -o $@ $<
build/asan/gen/%.o: build/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O1 $(SAN) -c -o $@ $<
build/asan/tests/%: tests/unit/%.c $(call obj,asan,$(SERVER_SRC)) $(call archives,asan) | build/.deps-test
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O1 $(SAN) -Itests/unit -o $@ $(filter-out %.a,$^) $(call archives,asan) $(LDLIBS) -lcmocka
# the bench's recorders live with the client
build/asan/tests/test_bench_hist: $(call obj,asan,src/cli/bench_hist.c)
build/asan/delayqd: $(call obj,asan,$(SERVER_SRC) src/server/main.c) $(call archives,asan)
	$(CC) $(SAN) -o $@ $^ $(LDLIBS)
build/asan/delayq: $(call obj,asan,$(CLI_SRC) $(CLIENT_SRC)) build/asan/libdq_proto.a build/asan/libdq_lib.a
	$(CC) $(SAN) -pthread -o $@ $^ $(LDLIBS)

# --- libdelayq: the C client and worker library (include/delayq.h) ------
# Built from src/client/ alone (hiredis + pthreads); installed with
# `make install PREFIX=/some/dir` (header, .a, .so, pkg-config file).
PREFIX  ?= /usr/local
LIBDQ_VERSION := 0.1.0
LIBDQ_OBJ := $(call obj,pic,$(CLIENT_SRC))
.PHONY: libdelayq install
libdelayq: build/lib/libdelayq.a build/lib/libdelayq.so
build/pic/%.o: src/%.c | build/.deps-build
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -pthread -MMD -MP -c -o $@ $<
build/lib/libdelayq.a: $(LIBDQ_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
build/lib/libdelayq.so: $(LIBDQ_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread -Wl,-soname,libdelayq.so.0 -o $@.0 $^ $$(pkg-config --libs hiredis)
	ln -sf libdelayq.so.0 $@
install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/delayq.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 build/lib/libdelayq.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 build/lib/libdelayq.so.0 $(DESTDIR)$(PREFIX)/lib/
	ln -sf libdelayq.so.0 $(DESTDIR)$(PREFIX)/lib/libdelayq.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(LIBDQ_VERSION)|' src/client/delayq.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/delayq.pc
	install -m 755 bin/delayqd bin/delayq $(DESTDIR)$(PREFIX)/bin/
# the client's unit tests run against a real build/asan/delayqd
build/asan/tests/test_client: $(call obj,asan,$(CLIENT_SRC)) | build/asan/delayqd

unit: $(addprefix build/asan/tests/,$(UNIT_TESTS))
	@set -e; for t in $^; do echo "== $$t"; $$t; done

integration: build/asan/delayqd build/asan/delayq | build/.deps-test
	DELAYQD=$(CURDIR)/build/asan/delayqd DELAYQ=$(CURDIR)/build/asan/delayq \
	  DELAYQ_STORES=$${DELAYQ_STORES:-embedded,redis} \
	  $(PYTHON) -m pytest -q tests/integration

test: all
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory integration

# --- fuzzing (not part of make test) -------------------------------------
FUZZ_TARGETS := fuzz_resp fuzz_wal fuzz_http_json
build/fuzz/%: tests/fuzz/%.c $(CORE_SRC)
	@scripts/deps.sh fuzz
	@mkdir -p build/fuzz
	clang -std=gnu11 -g -O1 -Isrc -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	  -o $@ $^ $(LDLIBS)
fuzz: $(addprefix build/fuzz/,$(FUZZ_TARGETS))
	@set -e; for f in $^; do echo "== $$f ($${FUZZ_SECONDS:-60} s)"; mkdir -p build/fuzz/corpus-$$(basename $$f); \
	  $$f -max_total_time=$${FUZZ_SECONDS:-60} build/fuzz/corpus-$$(basename $$f) tests/fuzz/seeds-$$(basename $$f); done

bench: all
	@scripts/deps.sh bench
	scripts/compare-bench

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
