"""Columns of an in-memory table (a pandas DataFrame, a Polars DataFrame or LazyFrame) or of a Parquet dataset
folder, as one Arrow table whose columns the file readers' checks then read (:mod:`privagg.io`): the item type,
missing values and the domain are checked as for a file, rows named "row N of <source>" (from 1)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ParameterError
from .blocks import _Block, _pick_column, _shown

if TYPE_CHECKING:
    import pyarrow as pa

FRAME_KINDS = "a pandas DataFrame, a Polars DataFrame or LazyFrame, or the path of a Parquet file or dataset folder"


def frame_kind(data: Any) -> str | None:
    """``pandas``, ``polars``, ``polars-lazy``, ``dataset`` (a folder of Parquet files), ``file`` (a path to read as
    the command line reads --input), or None for anything else. pandas and Polars are not imported to decide."""
    module = type(data).__module__.split(".")[0]
    name = type(data).__name__
    if module == "pandas" and name == "DataFrame":
        return "pandas"
    if module == "polars" and name in ("DataFrame", "LazyFrame"):
        return "polars" if name == "DataFrame" else "polars-lazy"
    if isinstance(data, (str, Path)):
        return "dataset" if Path(data).is_dir() else "file"
    return None


def frame_name(data: Any) -> str:
    """How errors and reports name ``data``: "a pandas DataFrame", ..., or its path."""
    names = {"pandas": "a pandas DataFrame", "polars": "a Polars DataFrame", "polars-lazy": "a Polars LazyFrame"}
    return names.get(frame_kind(data) or "", str(data))


def frame_table(data: Any, columns: list[str], fields: list[str]) -> pa.Table:
    """The ``columns`` of ``data`` (:func:`frame_kind` not ``file``) as an Arrow table of those columns, in order.

    A column that is absent is an error naming its argument (``fields``, one per column) and the columns there
    are; a pandas object column mixing kinds (integers and text) names the kinds; strings come as Arrow strings,
    NaN as missing (as an empty cell of a file) and a float column of whole numbers (pandas' integers with a
    missing value) as integers, so that the file readers' rules hold unchanged."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = frame_kind(data)
    names = _column_names(data, kind)
    for column, field in zip(columns, fields):
        try:
            _pick_column(names, column, header=True)
        except ParameterError as err:
            raise ParameterError(field, f"a column of {frame_name(data)}: {err.accepted}", err.got) from None
    if kind in ("polars", "polars-lazy"):
        schema = data.collect_schema() if kind == "polars-lazy" else data.schema
        for column, field in zip(columns, fields):
            if str(schema[column]) == "Object":  # Python objects: Arrow would get their pointers
                raise ParameterError(field, "one kind of value throughout the column (integers or strings)",
                                     f"column {column!r} of {frame_name(data)} holds Python objects (dtype "
                                     "Object: mixed kinds)")
    if kind == "pandas":
        table = _from_pandas(data, columns, fields)
    elif kind == "polars":
        table = data.select(columns).to_arrow()
    elif kind == "polars-lazy":
        table = data.select(columns).collect().to_arrow()
    else:
        import pyarrow.dataset as ds

        table = ds.dataset(data, format="parquet").to_table(columns=columns)
    out = []
    for name, field, column in zip(columns, fields, table.columns):
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        plain = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        if pa.types.is_nested(plain) or pa.types.is_binary(plain) or pa.types.is_large_binary(plain) or \
                pa.types.is_fixed_size_binary(plain):
            raise ParameterError(field, "a column of plain values (numbers or strings)",
                                 f"values of type {column.type} in column {name!r} of {frame_name(data)}")
        if pa.types.is_large_string(column.type) or pa.types.is_string_view(column.type):
            column = column.cast(pa.string())
        elif pa.types.is_floating(column.type):
            column = pc.if_else(pc.is_nan(column), None, column)  # Polars keeps NaN apart from null: both missing
            whole = pc.all(pc.equal(column, pc.floor(column))).as_py()
            if whole is not False and pc.all(pc.less(pc.abs(column), 2.0**53)).as_py() is not False:
                column = column.cast(pa.int64())
        out.append(column)
    return pa.table(out, names=columns)


def table_blocks(table: pa.Table, column: str) -> list[_Block]:
    """One column of ``table`` as the file readers' blocks: rows counted from 1."""
    return [_Block(table.column(column).combine_chunks(), 1, "row", table.num_rows)]


def _column_names(data: Any, kind: str | None) -> list[str]:
    if kind == "pandas":
        return [str(name) for name in data.columns]
    if kind == "polars":
        return list(data.columns)
    if kind == "polars-lazy":
        return list(data.collect_schema().names())
    import pyarrow.dataset as ds

    try:
        dataset = ds.dataset(data, format="parquet")
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError: a folder of other files
        raise ParameterError("data", f"{FRAME_KINDS} (a folder of Parquet files)",
                             f"{data} ({str(err).splitlines()[0]})") from None
    if not dataset.files:
        raise ParameterError("data", f"{FRAME_KINDS} (a folder of Parquet files)", f"{data} (no file in it)")
    return list(dataset.schema.names)


def _from_pandas(frame: Any, columns: list[str], fields: list[str]) -> pa.Table:
    import pyarrow as pa

    frame = frame.rename(columns=str)
    try:
        return pa.Table.from_pandas(frame[columns], preserve_index=False)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        for column, field in zip(columns, fields):
            try:
                pa.array(frame[column], from_pandas=True)
            except (pa.ArrowTypeError, pa.ArrowInvalid):
                kinds = sorted({type(v).__name__ for v in frame[column].dropna()})
                raise ParameterError(field, "one kind of value throughout the column (integers or strings)",
                                     f"column {column!r} of a pandas DataFrame mixes {_shown(kinds)}") from None
        raise
