// The language status item: what a user sees of the server's state, model and speedups.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as vscode from "vscode";
import { LanguageStatusSeverity, mock, MockStatusItem } from "./vscode-mock";
import { ServerStatus } from "../src/status";

describe("ServerStatus", () => {
    let item: MockStatusItem;
    let status: ServerStatus;
    beforeEach(() => {
        mock.reset();
        status = new ServerStatus(vscode.languages.createLanguageStatusItem("dice.status", { language: "python" }));
        item = mock.statusItems[0];
    });

    it("starts busy, with no model, and opens the logs when clicked", () => {
        assert.equal(item.text, "DICE starting");
        assert.equal(item.detail, "no model loaded");
        assert.equal(item.busy, true);
        assert.equal(item.command?.command, "dice.showLogs");
    });

    it("shows the server's state and the loaded model", () => {
        status.update({ state: "loading-model", model: null, message: "reading weights" });
        assert.equal(item.text, "DICE loading model");
        assert.equal(item.detail, "no model loaded · reading weights");
        status.update({ state: "idle", model: "DICE-1.7B" });
        assert.equal(item.text, "DICE ready");
        assert.equal(item.detail, "model DICE-1.7B");
        assert.equal(item.busy, false);
        status.update({ state: "generating" });
        assert.equal(item.detail, "model DICE-1.7B", "a status without `model` keeps the model");
    });

    it("shows the last speedup of the file in the active editor only", () => {
        status.update({ state: "checking", uri: "file:///a.py", speedup: 1.5 });
        status.update({ state: "idle", uri: "file:///b.py", speedup: 3.25 });
        status.setActive("file:///a.py");
        assert.equal(item.text, "DICE ready · 1.50×");
        status.setActive("file:///b.py");
        assert.equal(item.text, "DICE ready · 3.25×");
        status.setActive("file:///c.py");
        assert.equal(item.text, "DICE ready");
        status.setActive(undefined);
        assert.equal(item.text, "DICE ready");
    });

    it("forgets a file's speedup when its last check measured none", () => {
        status.setActive("file:///a.py");
        status.update({ state: "idle", uri: "file:///a.py", speedup: 2 });
        status.update({ state: "idle", uri: "file:///a.py", speedup: null });
        assert.equal(item.text, "DICE ready");
    });

    it("marks errors and a stopped server", () => {
        status.update({ state: "error", message: "no nvcc found" });
        assert.equal(item.severity, LanguageStatusSeverity.Error);
        assert.equal(item.detail, "no model loaded · no nvcc found");
        status.update({ state: "stopped" });
        assert.equal(item.text, "DICE stopped");
        status.update({ state: "idle" });
        assert.equal(item.severity, LanguageStatusSeverity.Information);
    });
});
