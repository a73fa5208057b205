# Two commands matter: `make demo` (the main job, on embedded defaults) and `make test` (everything CI runs).
.PHONY: demo test bench fmt

demo:
	cargo run --release --locked -- demo

test:
	scripts/test.sh

bench:
	cargo bench --locked --bench capsule_build

fmt:
	cargo fmt --all
