# Everything installs into .venv/ under the repository: `make demo` and `make test` work on a fresh clone,
# today and on any later day: every package is the version (and file hash) uv.lock holds.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
UV_VERSION := 0.13.9
EXTRAS := --extra dev --extra export --extra reference
RUN := runs/an4

.PHONY: install lock demo mini-librispeech test lint benchmark clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "uv==$(UV_VERSION)"

# --locked: an error, not a new resolution, where uv.lock is out of date with pyproject.toml;
# --inexact: uv itself stays in the environment; --compile-bytecode: each package's .pyc written
# once here, not compiled anew by every process that imports torch where the environment asks
# Python to write none (PYTHONDONTWRITEBYTECODE): a fresh clone's suite took 10.5 min, now 9.
$(BIN)/las: pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --inexact --compile-bytecode $(EXTRAS)
	touch $@

install: $(BIN)/las

# Resolve every package anew (the newest each range admits) into uv.lock; commit it with what needed it.
lock: | $(UV)
	$(UV) lock --upgrade

# Train on the bundled AN4 corpus (resumed when the run already exists), decode dev greedily and
# with beam search, score both.
demo: install
	@if [ -f $(RUN)/last.pt ]; then echo "$(RUN) exists: resuming it (rm -r $(RUN) to start over)"; \
		$(BIN)/las train --resume; else $(BIN)/las train; fi
	$(BIN)/las decode $(RUN)/best.pt data/an4/dev.tsv --strategy greedy --out $(RUN)/dev.csv
	$(BIN)/las eval $(RUN)/dev.csv data/an4/dev.tsv
	$(BIN)/las decode $(RUN)/best.pt data/an4/dev.tsv --strategy beam --beam-size 8 --out $(RUN)/dev_beam.csv
	$(BIN)/las eval $(RUN)/dev_beam.csv data/an4/dev.tsv

# Mini LibriSpeech from its download (or SOURCE=a LibriSpeech folder you have) to a WER report on
# the reporting speakers: data/mini-librispeech/README.md. SEED=2, 3 for the other seeds. The
# transcripts' LM, which the recipe's decoding fuses (decode.lm), is pre-trained first when missing.
ML := data/mini-librispeech
ML_RUN := runs/mini-librispeech/seed-$(or $(SEED),1)
ML_LM := runs/mini-librispeech/lm.pt
mini-librispeech: install
	@[ -f $(ML)/corpus/train.tsv ] || $(BIN)/python $(ML)/prepare.py $(if $(SOURCE),--source $(SOURCE))
	@[ -f $(ML_LM) ] || $(BIN)/las pretrain --config $(ML)/recipe.toml --train $(ML)/corpus/train.tsv --out $(ML_LM) --epochs 60
	@if [ -f $(ML_RUN)/last.pt ]; then $(BIN)/las train --config $(ML)/recipe.toml --out $(ML_RUN) --resume; \
		else $(BIN)/las train --config $(ML)/recipe.toml --out $(ML_RUN) --seed $(or $(SEED),1); fi
	$(BIN)/las decode $(ML_RUN)/best.pt $(ML)/corpus/report.tsv --format kaldi --out $(ML_RUN)/report.txt
	$(BIN)/las eval $(ML_RUN)/report.txt $(ML)/corpus/report.tsv

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check las tests scripts
	$(BIN)/ruff format --check las tests scripts

benchmark: install
	$(UV) sync --locked --inexact $(EXTRAS) --extra benchmark
	$(BIN)/python scripts/benchmark.py

clean:
	rm -rf $(VENV) .cache runs
