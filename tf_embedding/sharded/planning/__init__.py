"""Making a sharding plan (`tf_embedding.ShardingPlan`) when none is given: the traffic each
kind costs, and the planner that weighs it.

* `traffic`: the bytes a synchronous multi-worker step moves per table and kind (one definition
  of the formulas docs/sharding_plans.md states; tools/traffic_table.py tabulates them).
* `planner`: `plan_tables`, a plan from the tables, their lookups per step, the worker count
  and the memory per worker.
"""
