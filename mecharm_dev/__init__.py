"""Development checks, harnesses and fakes: not part of the product (docs/architecture.md).

Everything here runs from a checkout (``python -m mecharm_dev.successcheck``, the tests,
``make report-check``): it measures the product against the simulator's truth, drives
it from outside, or stands in for a vendor's service. The wheel does not contain this
package (``pyproject.toml``'s package list), and no product package imports it
(tests/test_layout.py).
"""
