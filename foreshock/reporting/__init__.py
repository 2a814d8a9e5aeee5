"""Reporting across stages: what the pipeline holds, read back from every stage's outputs
(the fleet page, the freshness check behind ``foreshock status``).  The last stage before
the commands: it reads the lake, features, models and drain outputs through their owners'
readers, and only ``foreshock.pipelines`` imports it."""
