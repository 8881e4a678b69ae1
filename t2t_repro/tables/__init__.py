"""The paper's tables measured or counted here (`python -m t2t_repro.paper table1|table2`):
Table 1's per-layer cost (`layer_complexity`) and Table 2's training cost (`training_cost`)."""
