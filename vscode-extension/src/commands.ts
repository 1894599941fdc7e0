/**
 * The extension's commands. Generate, infill and benchmark run the server's own commands on the active document;
 * the language client registers those under their server ids, so these only pick the document and report failures.
 */

import * as vscode from "vscode";
import { ExecuteCommandSignature, MessageType } from "vscode-languageclient/node";
import { ServerMessages } from "./notifications";

/** Client command id → the server command it runs with `[uri]`, and its title (package.json's). */
export const SERVER_COMMANDS: Readonly<Record<string, { server: string; title: string }>> = {
    "dice.generate": { server: "dice.server.generate", title: "Generate CUDA kernel" },
    "dice.infill": { server: "dice.server.infill", title: "Infill kernel core" },
    "dice.benchmark": { server: "dice.server.benchmark", title: "Benchmark now" },
};

/** What the commands need from the rest of the extension. */
export interface CommandTarget {
    readonly running: boolean;
    readonly messages: ServerMessages;
    refresh(reason: string, force: boolean): Promise<void>;
    showLogs(): void;
}

export function registerCommands(target: CommandTarget): vscode.Disposable[] {
    const disposables = Object.entries(SERVER_COMMANDS).map(([id, command]) =>
        vscode.commands.registerCommand(id, () => runOnActiveDocument(target, command.server, command.title)),
    );
    disposables.push(
        vscode.commands.registerCommand("dice.restart", () => target.refresh("restart command", true)),
        vscode.commands.registerCommand("dice.showLogs", () => target.showLogs()),
    );
    return disposables;
}

async function runOnActiveDocument(target: CommandTarget, serverId: string, title: string): Promise<unknown> {
    const document = vscode.window.activeTextEditor?.document;
    if (document === undefined || document.languageId !== "python") {
        void vscode.window.showWarningMessage("DICE: open the Python file of a PyTorch module first.");
        return undefined;
    }
    if (!target.running) {
        const choice = await vscode.window.showErrorMessage("DICE: the server is not running.", "Show logs", "Restart");
        if (choice === "Show logs") {
            target.showLogs();
        } else if (choice === "Restart") {
            await target.refresh("restart from a command", true);
        }
        return undefined;
    }
    const mark = target.messages.mark();
    let answer: unknown;
    try {
        // The uri goes as a string: command arguments are sent as JSON and the server takes [uri].
        answer = await vscode.commands.executeCommand(serverId, document.uri.toString());
    } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        void vscode.window.showErrorMessage(`DICE: ${message}`);
        return undefined;
    }
    // The server shows most refusals itself (window/showMessage, just before it answers), some only the first time
    // (Session.show_once, dice_lsp/session/state.py): a message from it while the command ran means it has spoken.
    const refusal = refused(answer);
    if (refusal !== undefined && !target.messages.heardSince(mark)) {
        target.messages.notify(MessageType.Warning, `DICE: ${title}: ${refusal}`);
    }
    return answer;
}

/**
 * Why the server's answer says the command did not start or did nothing: `{started: false, message}` (Benchmark) or
 * `{ok: false, message}` (Generate, Infill). Undefined for one that went ahead, and for what the user did
 * themselves: a cancel ("cancelled"), an edit they declined when asked (no reason given; src/confirm.ts).
 */
export function refused(answer: unknown): string | undefined {
    if (typeof answer !== "object" || answer === null) {
        return undefined;
    }
    const { ok, started, message } = answer as { ok?: unknown; started?: unknown; message?: unknown };
    if (ok !== false && started !== false) {
        return undefined;
    }
    return typeof message === "string" && message !== "" && message !== "cancelled" ? message : undefined;
}

export const RETRY = "Retry";

/**
 * The language client's executeCommand middleware: every run of a server command passes here, from the palette, a
 * code action or a code lens alike. When Generate or Infill wrote code that cannot be used as it is (the answer's
 * `unusable`, from the server's reading of it), says so and offers to run the command again on the same file.
 */
export function offerRetry(messages: ServerMessages, showLogs: () => void) {
    const run = async (command: string, args: unknown[], next: ExecuteCommandSignature): Promise<unknown> => {
        const answer: unknown = await next(command, args);
        const why = unusable(answer);
        const title = Object.values(SERVER_COMMANDS).find((known) => known.server === command)?.title;
        if (why !== undefined && title !== undefined) {
            void messages
                .ask(MessageType.Warning, `DICE: ${title}: the code it wrote cannot be used as it is: ${why}.`, RETRY,
                    "Show logs")
                .then((choice) => {
                    if (choice === RETRY) {
                        return vscode.commands.executeCommand(command, ...args);
                    }
                    if (choice === "Show logs") {
                        showLogs();
                    }
                    return undefined;
                });
        }
        return answer;
    };
    return run;
}

/** Why the code a Generate or Infill answer says it wrote cannot be used; undefined when it can or none was written. */
export function unusable(answer: unknown): string | undefined {
    if (typeof answer !== "object" || answer === null) {
        return undefined;
    }
    const { ok, unusable: why } = answer as { ok?: unknown; unusable?: unknown };
    return ok === true && typeof why === "string" && why !== "" ? why : undefined;
}
