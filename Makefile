# ted: the two commands are `make train` and `make test`.
BUILD ?= build
JOBS ?= 2
LOG ?= runs/moby/log.jsonl

.PHONY: all ted ted-only setup test train plot bench clean
all: ted

$(BUILD)/Makefile: CMakeLists.txt tests/tests.cmake
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

# everything: ted, the CUDA emulation and the test programs
ted: $(BUILD)/Makefile
	@$(MAKE) --no-print-directory -C $(BUILD) -j$(JOBS)

# the ted binary alone (what make train and make bench need)
ted-only: $(BUILD)/Makefile
	@$(MAKE) --no-print-directory -C $(BUILD) -j$(JOBS) ted

setup:
	@bash scripts/setup.sh

# the test suite: installs what is missing, builds, runs every CTest test
test: setup
	@$(MAKE) --no-print-directory ted
	cd $(BUILD) && ctest --output-on-failure -j1

# the default run: the configs/moby.json model on Moby-Dick, then samples; an interrupted run
# continues from its last checkpoint; ARGS go to ted train (make train ARGS="--steps 50")
train: setup
	@$(MAKE) --no-print-directory ted-only
	bash scripts/train_moby.sh $(ARGS)

plot:
	@bash scripts/plot.sh $(LOG)

bench: setup
	@$(MAKE) --no-print-directory ted-only
	./$(BUILD)/ted bench

clean:
	rm -rf $(BUILD)
