import numpy as np
import pytest

from schemas.tokens import common_prefix


def ids(*values: int, dtype: type = np.int32) -> np.ndarray:
    return np.asarray(values, dtype=dtype)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (ids(1, 2, 3), ids(1, 2, 3, 4, 5), 3),  # one extends the other
        (ids(1, 2, 3, 4, 5), ids(1, 2, 3), 3),
        (ids(1, 2, 3), ids(1, 2, 3), 3),
        (ids(1, 9, 3), ids(1, 2, 3, 4), 1),  # they differ inside
        (ids(7, 2), ids(1, 2), 0),
        (ids(), ids(1, 2), 0),
        (ids(1, 2, 3), ids(1, 2, 3, 4, dtype=np.int64), 3),  # other dtypes: by value
        (ids(1, 2, 5), ids(1, 2, 3, 4, dtype=np.int64), 2),
    ],
)
def test_common_prefix(a: np.ndarray, b: np.ndarray, expected: int) -> None:
    assert common_prefix(a, b) == expected
