/**
 * The extension's commands. Generate, infill and benchmark run the server's own commands on the active document;
 * the language client registers those under their server ids, so these only pick the document and report failures.
 */

import * as vscode from "vscode";

/** Client command id → the server command it runs with `[uri]`. */
export const SERVER_COMMANDS: Readonly<Record<string, string>> = {
    "dice.generate": "dice.server.generate",
    "dice.infill": "dice.server.infill",
    "dice.benchmark": "dice.server.benchmark",
};

/** What the commands need from the rest of the extension. */
export interface CommandTarget {
    readonly running: boolean;
    refresh(reason: string, force: boolean): Promise<void>;
    showLogs(): void;
}

export function registerCommands(target: CommandTarget): vscode.Disposable[] {
    const disposables = Object.entries(SERVER_COMMANDS).map(([id, serverId]) =>
        vscode.commands.registerCommand(id, () => runOnActiveDocument(target, serverId)),
    );
    disposables.push(
        vscode.commands.registerCommand("dice.restart", () => target.refresh("restart command", true)),
        vscode.commands.registerCommand("dice.showLogs", () => target.showLogs()),
    );
    return disposables;
}

async function runOnActiveDocument(target: CommandTarget, serverId: string): Promise<unknown> {
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
    try {
        // The uri goes as a string: command arguments are sent as JSON and the server takes [uri].
        return await vscode.commands.executeCommand(serverId, document.uri.toString());
    } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        void vscode.window.showErrorMessage(`DICE: ${message}`);
        return undefined;
    }
}
