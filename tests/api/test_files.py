"""Task folder files over /api/v1/tasks: listing, download headers, refused paths."""

from __future__ import annotations

from urllib.parse import quote

from serverproc import ServerProcess


def test_task_files(server: ServerProcess) -> None:
    command = "mkdir -p out && printf '<script>alert(1)</script>' > out/page.html && echo hi > note.txt"
    handle = server.call("submit", task="command", task_name="files", command=command, shell=True)["answer"]
    final = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"], poll_interval=0.05)
    assert final["success"] is True, final
    assert set(final["answer"]["result"]["artifacts"]) == {"out/page.html", "note.txt"}
    base = f"/api/v1/tasks/{quote(handle['task_id'], safe='')}/files"
    with server.client() as client:
        listed = client.get(base).json()["items"]
        assert {item["path"] for item in listed} >= {"out/page.html", "note.txt", "status.json"}
        assert not any(item["path"].startswith(".") for item in listed)
        page = client.get(f"{base}/out/page.html")
        assert page.status_code == 200 and page.text == "<script>alert(1)</script>"
        assert page.headers["content-disposition"].startswith("attachment")
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in page.headers["content-security-policy"]
        assert client.get(f"{base}/note.txt").text == "hi\n"
        for bad in ("../../../etc/passwd", "%2e%2e/%2e%2e/server.json", ".worker.lock", "/etc/passwd"):
            reply = client.get(f"{base}/{bad}")
            assert reply.status_code in (400, 404), (bad, reply.status_code)
            assert "root:" not in reply.text
        assert client.get(f"{base}/missing.txt").json()["error"]["code"] == "file_not_found"
        bad_id = client.get("/api/v1/tasks/not.an.id/files")  # not-an-id: a task name
        assert bad_id.status_code == 400 and bad_id.json()["error"]["code"] == "invalid_task_id"
        absent = client.get(f"/api/v1/tasks/{quote('base#demo#none', safe='')}/files")
        assert absent.status_code == 404
