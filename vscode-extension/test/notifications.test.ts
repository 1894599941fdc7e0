// The server's window/showMessage: always in the log, popped up as dice.showNotifications says.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as vscode from "vscode";
import { MessageType, ShowMessageParams } from "vscode-languageclient/node";
import { mock } from "./vscode-mock";
import { ServerMessages } from "../src/notifications";

const EACH: ShowMessageParams[] = [
    { type: MessageType.Error, message: "dice-lsp: no nvcc found" },
    { type: MessageType.Warning, message: "dice-lsp: this workspace is not trusted" },
    { type: MessageType.Info, message: "dice-lsp: wrote conv_dice.py" },
    { type: MessageType.Log, message: "dice-lsp: a log line" },
];

describe("ServerMessages", () => {
    beforeEach(() => mock.reset());

    for (const [setting, kinds] of [
        ["off", []],
        ["onError", ["error"]],
        ["onWarning", ["error", "warning"]],
        ["always", ["error", "warning", "info", "info"]],
    ] as const) {
        it(`pops up ${kinds.length} of the four kinds with showNotifications ${setting}, and logs all`, () => {
            mock.settings.set("dice.showNotifications", setting);
            const messages = new ServerMessages(vscode.window.createOutputChannel("DICE", { log: true }));
            EACH.forEach((params) => messages.fromServer(params));
            assert.deepEqual(mock.messages.map((m) => m.kind), kinds);
            for (const { message } of EACH) {
                assert.ok(mock.output().includes(message), `${message} is not in the log`);
            }
        });
    }

    it("pops every message up by default, as the language client would (package.json's default)", () => {
        const messages = new ServerMessages(vscode.window.createOutputChannel("DICE", { log: true }));
        EACH.forEach((params) => messages.fromServer(params));
        assert.equal(mock.messages.length, 4);
    });

    it("knows whether the server spoke since a mark", () => {
        const messages = new ServerMessages(vscode.window.createOutputChannel("DICE", { log: true }));
        const mark = messages.mark();
        assert.equal(messages.heardSince(mark), false);
        messages.notify(MessageType.Warning, "DICE: the extension's own"); // not the server's
        assert.equal(messages.heardSince(mark), false);
        messages.fromServer(EACH[1]);
        assert.equal(messages.heardSince(mark), true);
        assert.equal(messages.heardSince(messages.mark()), false);
    });
});
