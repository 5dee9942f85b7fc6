# Everything installs into .venv/ under the repository: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN := runs/an4

.PHONY: install demo test lint benchmark clean

$(BIN)/las: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,export]"
	touch $@

install: $(BIN)/las

# Train on the bundled AN4 corpus (resumed when the run already exists), decode dev greedily and
# with beam search, score both.
demo: install
	@if [ -f $(RUN)/last.pt ]; then echo "$(RUN) exists: resuming it (rm -r $(RUN) to start over)"; \
		$(BIN)/las train --resume; else $(BIN)/las train; fi
	$(BIN)/las decode $(RUN)/best.pt data/an4/dev.tsv --strategy greedy --out $(RUN)/dev.csv
	$(BIN)/las eval $(RUN)/dev.csv data/an4/dev.tsv
	$(BIN)/las decode $(RUN)/best.pt data/an4/dev.tsv --strategy beam --beam-size 8 --out $(RUN)/dev_beam.csv
	$(BIN)/las eval $(RUN)/dev_beam.csv data/an4/dev.tsv

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check las tests scripts
	$(BIN)/ruff format --check las tests scripts

benchmark: install
	$(BIN)/python scripts/benchmark.py

clean:
	rm -rf $(VENV) .cache runs
