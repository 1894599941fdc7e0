// The client commands: which server command each runs, on which document, and what a user sees on failure.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as vscode from "vscode";
import { mock } from "./vscode-mock";
import { CommandTarget, registerCommands } from "../src/commands";

function fakeTarget(running: boolean) {
    const calls: string[] = [];
    const target: CommandTarget = {
        running,
        refresh: async (reason, force) => {
            calls.push(`refresh ${reason} force=${force}`);
        },
        showLogs: () => calls.push("showLogs"),
    };
    return { target, calls };
}

describe("registerCommands", () => {
    beforeEach(() => mock.reset());

    it("registers the five client commands under ids other than the server's", () => {
        registerCommands(fakeTarget(true).target);
        assert.deepEqual(
            [...mock.commands.keys()].sort(),
            ["dice.benchmark", "dice.generate", "dice.infill", "dice.restart", "dice.showLogs"],
        );
    });

    for (const [client, server] of [
        ["dice.generate", "dice.server.generate"],
        ["dice.infill", "dice.server.infill"],
        ["dice.benchmark", "dice.server.benchmark"],
    ]) {
        it(`${client} runs ${server} with the active document's uri`, async () => {
            registerCommands(fakeTarget(true).target);
            let received: unknown[] | undefined;
            mock.commands.set(server, (...args: unknown[]) => (received = args));
            const document = mock.openDocument("/work/project/conv.py", "class Model: ...\n");
            await vscode.commands.executeCommand(client);
            assert.deepEqual(received, [document.uri.toString()]);
        });
    }

    it("asks for a Python file when none is active", async () => {
        registerCommands(fakeTarget(true).target);
        mock.openDocument("/work/project/notes.md", "# notes", "markdown");
        await vscode.commands.executeCommand("dice.generate");
        assert.equal(mock.messages[0]?.kind, "warning");
        assert.ok(!mock.executed.some((call) => call.command === "dice.server.generate"));
    });

    it("offers a restart when the server is not running", async () => {
        const { target, calls } = fakeTarget(false);
        registerCommands(target);
        mock.openDocument("/work/project/conv.py", "");
        mock.answer = "Restart";
        await vscode.commands.executeCommand("dice.benchmark");
        assert.match(mock.messages[0]?.text ?? "", /not running/);
        assert.deepEqual(calls, ["refresh restart from a command force=true"]);
    });

    it("shows the server's error when its command fails", async () => {
        registerCommands(fakeTarget(true).target);
        mock.commands.set("dice.server.infill", () => {
            throw new Error("no ModelNew in this file");
        });
        mock.openDocument("/work/project/conv.py", "");
        await vscode.commands.executeCommand("dice.infill");
        assert.deepEqual(mock.messages, [{ kind: "error", text: "DICE: no ModelNew in this file", items: [] }]);
    });

    it("restarts and shows logs", async () => {
        const { target, calls } = fakeTarget(true);
        registerCommands(target);
        await vscode.commands.executeCommand("dice.restart");
        await vscode.commands.executeCommand("dice.showLogs");
        assert.deepEqual(calls, ["refresh restart command force=true", "showLogs"]);
    });
});
