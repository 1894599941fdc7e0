/**
 * Entry point: starts the dice-lsp server for Python files and wires settings, trust, the interpreter,
 * commands and the status item to it. The server does the work; this file only connects editor events to it.
 */

import * as vscode from "vscode";
import { registerCommands } from "./commands";
import { LAUNCH_SETTINGS } from "./launch";
import { PythonEnvironments, pythonEnvironments } from "./python";
import { ServerSession, errorMessage } from "./server";
import { SECTION } from "./settings";
import { ServerStatus } from "./status";

let session: ServerSession | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    const log = vscode.window.createOutputChannel("DICE", { log: true });
    const status = new ServerStatus(vscode.languages.createLanguageStatusItem("dice.status", { language: "python" }));
    const environments = await findPythonEnvironments(log);
    const home = {
        root: context.extensionPath,
        storage: context.globalStorageUri.fsPath,
        version: (context.extension.packageJSON as { version: string }).version,
    };
    session = new ServerSession(log, status, environments, home);
    const current = session;

    const showActive = (editor: vscode.TextEditor | undefined): void =>
        status.setActive(editor?.document.uri.toString());
    showActive(vscode.window.activeTextEditor);

    context.subscriptions.push(
        log,
        status,
        current,
        ...registerCommands({
            get running() {
                return current.running;
            },
            messages: current.messages,
            refresh: (reason, force) => current.refresh(reason, force),
            showLogs: () => log.show(),
        }),
        vscode.window.onDidChangeActiveTextEditor(showActive),
        vscode.workspace.onDidChangeConfiguration((event) => {
            if (LAUNCH_SETTINGS.some((key) => event.affectsConfiguration(key))) {
                void current.refresh("launch settings changed");
            } else if (event.affectsConfiguration(SECTION)) {
                void current.settingsChanged();
            }
        }),
        // Trust can change the interpreter (the Python extension's selection is only used once trusted) and
        // always changes `trustedWorkspace`; refresh restarts only in the first case.
        vscode.workspace.onDidGrantWorkspaceTrust(() => void current.refresh("workspace trusted")),
    );
    if (environments !== undefined) {
        context.subscriptions.push(
            environments.onDidChangeActiveEnvironmentPath(() => {
                if (vscode.workspace.getConfiguration(SECTION).get<string>("interpreter", "").trim() === "") {
                    void current.refresh("Python interpreter changed");
                }
            }),
        );
    }
    await current.refresh("activation");
}

export async function deactivate(): Promise<void> {
    await session?.stop();
    session = undefined;
}

async function findPythonEnvironments(log: vscode.LogOutputChannel): Promise<PythonEnvironments | undefined> {
    try {
        return await pythonEnvironments();
    } catch (error) {
        log.warn(`the Python extension's interpreter API is unavailable: ${errorMessage(error)}`);
        return undefined;
    }
}
