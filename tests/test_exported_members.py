import runyard


def test_public_api_is_small_and_importable() -> None:
    assert runyard.__all__ == sorted(runyard.__all__)
    for name in runyard.__all__:
        assert getattr(runyard, name).__name__ == name
    assert set(runyard.__all__) == {
        "AsyncClient", "Client", "Pipeline", "RunyardError", "Settings", "Task", "TaskInput",
        "TaskOutput", "TaskRun", "TaskState", "TaskStatus", "TaskType", "Workspace",
    }  # fmt: skip
