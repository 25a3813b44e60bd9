"""The GPU twin: a recorded GPU's ladder replayed on any machine, to predict a ladder's plan,
probe count and wall time before it runs (bench/gpu_twin.py, bench/twin_check.py).

A tool beside the product, not part of it: the wheel does not install it (pyproject's
`packages` leaves it out) and neither tuneup nor its plugins import it (the import-linter
contract `no-twin-in-product`). The bench scripts and the tests reach it from the checkout.

* `model.py`: the twin itself (`GpuTwin`, the `sim` trainer answering as the recorded machine);
* `evidence.py`: an evidence folder or a journal read into figures;
* `costs.py`: what a machine's probes cost, measured or assumed;
* `rates.py`: the rates a journal's probes measured, and their noise;
* `learned.py`: what recorded ladders say beyond costs and rates (failures, batch gains);
* `against.py`: the twin's probes set beside a real ladder's, probe by probe.
"""
