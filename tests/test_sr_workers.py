

def test_the_same_data_under_new_column_names_is_another_task() -> None:
    """Found by the regressor's warm start: a worker keyed by data alone answered with the old names."""
    import numpy as np

    from harness.engine.task import Task
    from harness.sr.workers import task_key

    X, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    a = Task.from_arrays(X, y, name="user_data", input_names=["x1", "x2"])
    b = Task.from_arrays(X, y, name="user_data", input_names=["a", "b"])
    assert task_key(a) != task_key(b) and task_key(a) == task_key(Task.from_arrays(X, y, name="user_data",
                                                                                  input_names=["x1", "x2"]))
