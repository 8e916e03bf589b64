"""PR records, the SWE-RL prompt, synthetic records, SWE-bench import and Grain loaders.

CLI: ``python -m swerl_jax.data validate FILE | convert IN OUT | import-swebench ... | stats FILE``.
"""

from swerl_jax.data.records import (
    REQUIRED_FIELDS,
    ErrorCounter,
    RecordError,
    read_records,
    validate_record,
    write_records,
)

__all__ = ["REQUIRED_FIELDS", "ErrorCounter", "RecordError", "read_records", "validate_record", "write_records"]
